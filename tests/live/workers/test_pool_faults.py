"""Faults inside the pool's supervision and the workers' engines, with real processes: no
fault of one worker ends the pool, and an engine's exception ends only what it was doing."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import traceback
from collections.abc import Callable
from pathlib import Path

import anyio
import numpy as np
import pytest

from bench.common.audio import expected_checksum
from shared.engines import Role
from shared.errors import WorkerError
from shared.messages import StreamOptions, StreamResult
from shared.settings import PoolSettings
from tests.helpers import failing_engine
from tests.helpers.failing_engine import (
    CLOSE_RESULTS,
    FAIL_LOAD_ENV,
    FAIL_OPEN,
    FAIL_STEP,
    UNREADABLE,
    marked,
)
from tests.helpers.timing import within
from workers.ipc.slab import SLAB_PREFIX
from workers.pool import ResultObserver, WorkerPool

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]


def _our_segments(pid: int | None = None) -> set[str]:
    prefix = f"{SLAB_PREFIX}{pid or os.getpid()}_"
    return {name for name in os.listdir("/dev/shm") if name.startswith(prefix)}


def _process_state(pid: int) -> str | None:
    """The process's state letter (R, S, T for stopped, Z...), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0]
    except FileNotFoundError:
        return None


async def _until(condition: Callable[[], object], timeout: float) -> None:
    """Poll ``condition`` (the state of another process) until it holds."""
    with within(timeout):
        while True:
            if condition():
                return
            await anyio.sleep(0.005)


async def _sigstop(pid: int) -> None:
    """SIGSTOP and wait until the process is stopped (the signal is delivered later)."""
    os.kill(pid, signal.SIGSTOP)
    await _until(lambda: _process_state(pid) == "T", timeout=5)


def _failing_pool(
    settings: PoolSettings | None = None, *, on_result: ResultObserver | None = None
) -> WorkerPool:
    """A pool whose workers run the checksum engine that fails on demand."""
    settings = settings or PoolSettings(model="checksum", devices=("cpu",))
    return WorkerPool(settings, on_result=on_result, engine_loader=failing_engine.load)


def test_a_worker_killed_with_commands_waiting_is_replaced_and_the_pool_goes_on(
    tmp_path: Path,
) -> None:
    """Issue #14's first fault, in a fresh interpreter: a stopped worker, thousands of
    OPEN/CLOSE headers waiting in the parent (more than its pipe holds), then SIGKILL (what
    the hang watchdog does). The pending write then meets a broken pipe; that must neither
    end the pool's supervision nor cancel its caller. Three rounds: on the code before the
    fix, the broken pipe won the race with the EOF about three times in four."""
    script = tmp_path / "full_pipe.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal
            import anyio, numpy as np
            from shared.settings import PoolSettings
            from bench.common.audio import expected_checksum
            from tests.helpers.timing import within
            from workers.pool import WorkerPool

            async def main() -> None:
                settings = PoolSettings(model="checksum", devices=("cpu",))
                async with WorkerPool(settings) as pool:
                    for round in range(1, 4):
                        (worker,) = pool.status()
                        os.kill(worker.pid, signal.SIGSTOP)
                        for _ in range(4000):  # 352 kB of headers against a 64 KiB pipe
                            stream = pool.open_stream()
                            await stream.aclose()
                        os.kill(worker.pid, signal.SIGKILL)
                        with within(30):
                            while pool.status()[0].restarts < round:
                                await anyio.sleep(0.02)
                            await pool.wait_ready()
                        (after,) = pool.status()
                        assert after.restarts == round and after.pid != worker.pid, after
                        audio = np.arange(3000, dtype=np.int16)
                        with within(30):
                            assert await pool.transcribe(audio) == expected_checksum(audio)
                        assert pool.health is None, pool.health
                print(os.getpid())

            if __name__ == "__main__":  # not again in the spawned workers
                anyio.run(main)
            """
        )
    )
    completed = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr
    assert "resource_tracker" not in completed.stderr
    assert "leaked" not in completed.stderr
    assert completed.stderr.count("died (exit code -9)") == 3
    assert _our_segments(int(completed.stdout.strip())) == set()


async def test_a_worker_is_dead_from_the_eof_of_its_results() -> None:
    """A worker whose results pipe has read EOF takes no new stream, even while its process
    lingers (here: it closed the pipe and sleeps; the supervisor kills it after a grace)."""
    async with _failing_pool(PoolSettings(model="checksum", devices=("cpu", "cpu"))) as pool:
        victim_stream = pool.open_stream()
        other_stream = pool.open_stream()
        victim = victim_stream.worker_index
        assert other_stream.worker_index != victim
        victim_pid = pool.status()[victim].pid
        assert victim_pid is not None
        await victim_stream.send(marked(CLOSE_RESULTS))
        await _until(lambda: pool.status()[victim].state != "ready", timeout=10)
        assert pool.status()[victim].state == "dead"
        assert _process_state(victim_pid) not in (None, "Z")  # EOF read, process not reaped

        # Least-loaded routing would pick the victim (fewer streams) were it not dead.
        await other_stream.send(np.ones(10, dtype=np.int16))
        opened = [pool.open_stream() for _ in range(10)]
        assert {stream.worker_index for stream in opened} == {other_stream.worker_index}
        with within(10), pytest.raises(WorkerError, match="died"):
            await victim_stream.receive()
        for stream in [victim_stream, other_stream, *opened]:
            await stream.aclose()

        with within(30):
            await pool.wait_ready()
        replaced = pool.status()[victim]
        assert (replaced.restarts, replaced.state) == (1, "ready")
        assert replaced.pid != victim_pid
        assert _process_state(victim_pid) is None
        audio = np.arange(5000, dtype=np.int16)
        assert await pool.transcribe(audio) == expected_checksum(audio)


async def test_a_lost_workers_error_is_a_new_instance_each_time_it_is_raised() -> None:
    """One error fails all of a lost worker's streams, and each stream is read and written
    by tasks of their own. Were one instance raised in each, its traceback would gather
    every task's frames, and a task clearing its traceback's frames (the session does, to
    let go of audio) would close the others' suspended coroutines."""
    async with _failing_pool() as pool:
        streams = [pool.open_stream() for _ in range(2)]
        pid = pool.status()[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        raised: list[BaseException] = []
        with within(10):
            for stream in streams:
                with pytest.raises(WorkerError, match="died") as received:
                    await stream.receive()
                with pytest.raises(WorkerError, match="died") as sent:
                    await stream.send(np.ones(10, np.int16))
                raised += [received.value, sent.value]
        assert len({id(error) for error in raised}) == len(raised) == 4
        for error in raised:  # each traceback holds only the frames its own raise went through
            frames = traceback.extract_tb(error.__traceback__)
            assert len(frames) == len({(frame.filename, frame.lineno) for frame in frames})
        for stream in streams:
            await stream.aclose()


async def test_an_engine_exception_fails_that_steps_streams_and_not_the_worker() -> None:
    async with _failing_pool() as pool:
        (worker,) = pool.status()
        assert worker.pid is not None
        good = pool.open_stream()
        failing = pool.open_stream()
        beside = pool.open_stream()  # no fault of its own, but in the failing step
        audio = np.arange(20000, dtype=np.int16)
        await good.send(audio[:8000])
        with within(10):
            assert (await good.receive()).text == expected_checksum(audio[:8000])

        # Both pieces wait in the pipe of the stopped worker: it takes them in one step.
        await _sigstop(worker.pid)
        await failing.send(marked(FAIL_STEP))
        await beside.send(audio[:100])
        os.kill(worker.pid, signal.SIGCONT)
        for stream in (failing, beside):
            with (
                within(10),
                pytest.raises(
                    WorkerError,
                    match="checksum failed on this step: RuntimeError: asked to fail this step",
                ),
            ):
                await stream.receive()
            with pytest.raises(WorkerError):
                await stream.send(audio[:100])
            await stream.aclose()

        # The stream of another step, and a new one, verify; the worker lives on.
        await good.finish(audio[8000:])
        with within(10):
            results = [result async for result in good]
        assert results[-1].is_final
        assert results[-1].text == expected_checksum(audio)
        await good.aclose()
        with within(10):
            assert await pool.transcribe(audio) == expected_checksum(audio)
        (after,) = pool.status()
        assert (after.pid, after.restarts, after.state) == (worker.pid, 0, "ready")
        assert after.active_streams == 0


async def test_an_engine_exception_opening_a_stream_fails_that_stream() -> None:
    async with _failing_pool() as pool:
        (worker,) = pool.status()
        failing = pool.open_stream(StreamOptions(hotwords=(FAIL_OPEN,)))
        with (
            within(10),
            pytest.raises(WorkerError, match="checksum failed to open the stream: RuntimeError"),
        ):
            await failing.receive()
        await failing.aclose()
        audio = np.arange(3000, dtype=np.int16)
        with within(10):
            assert await pool.transcribe(audio) == expected_checksum(audio)
        (after,) = pool.status()
        assert (after.pid, after.restarts) == (worker.pid, 0)


async def test_a_supervision_error_fails_that_workers_streams_and_replaces_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An ``on_result`` observer that raises (once) is a fault of the supervision: the
    worker it happened on is given up like a dead one, in one log line; the pool serves on."""
    raised: list[int] = []

    def observer(worker: int, result: StreamResult) -> None:
        if not raised:
            raised.append(worker)
            raise RuntimeError("the observer's bug")

    settings = PoolSettings(model="checksum", devices=("cpu", "cpu"))
    async with _failing_pool(settings, on_result=observer) as pool:
        first = pool.open_stream()
        second = pool.open_stream()
        assert first.worker_index != second.worker_index
        victim = first.worker_index
        victim_pid = pool.status()[victim].pid
        audio = np.arange(10000, dtype=np.int16)
        with caplog.at_level(logging.ERROR, logger="workers.pool"):
            await first.send(audio[:1000])
            with (
                within(10),
                pytest.raises(WorkerError, match="routing its results raised RuntimeError"),
            ):
                await first.receive()
            with within(30):
                await pool.wait_ready()
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1
        assert "the observer's bug" in errors[0].getMessage()
        await first.aclose()

        # The other worker's stream was untouched; the replacement serves.
        await second.finish(audio)
        with within(10):
            results = [result async for result in second]
        assert results[-1].text == expected_checksum(audio)
        await second.aclose()
        replaced = pool.status()[victim]
        assert replaced.restarts == 1
        assert replaced.pid != victim_pid
        assert pool.status()[1 - victim].restarts == 0
        with within(10):
            assert await pool.transcribe(audio) == expected_checksum(audio)
        assert pool.health is None


async def test_an_unreadable_message_fails_that_workers_streams_and_replaces_it() -> None:
    async with _failing_pool() as pool:
        (worker,) = pool.status()
        stream = pool.open_stream()
        await stream.send(marked(UNREADABLE))
        with (
            within(10),
            pytest.raises(
                WorkerError, match=r"cannot be read \(RuntimeError: refusing to unpickle"
            ),
        ):
            await stream.receive()
        await stream.aclose()
        with within(30):
            await pool.wait_ready()
        (after,) = pool.status()
        assert (after.restarts, after.state) == (1, "ready")
        assert after.pid != worker.pid
        audio = np.arange(3000, dtype=np.int16)
        assert await pool.transcribe(audio) == expected_checksum(audio)


async def test_health_names_restarts_that_keep_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_load = tmp_path / "fail-load"
    monkeypatch.setenv(FAIL_LOAD_ENV, str(fail_load))  # spawned workers inherit it
    settings = PoolSettings(model="checksum", devices=("cpu",), unhealthy_after_s=0.1)
    pool = _failing_pool(settings)
    assert pool.health == "the worker pool has not been started"
    async with pool:
        assert pool.health is None
        (worker,) = pool.status()
        assert worker.pid is not None
        fail_load.touch()
        os.kill(worker.pid, signal.SIGKILL)
        await _until(lambda: pool.health is not None, timeout=30)
        health = pool.health
        assert health is not None
        assert "every restart fails" in health
        assert "asked to fail loading" in health

        fail_load.unlink()
        with within(30):
            await pool.wait_ready()
        assert pool.health is None
        assert pool.status()[0].restarts == 1
        audio = np.arange(3000, dtype=np.int16)
        assert await pool.transcribe(audio) == expected_checksum(audio)
    assert pool.health is None  # stopped as asked: not a fault


async def test_audio_sent_to_a_silent_worker_does_not_lengthen_its_hang_timeout() -> None:
    """What a stopped worker is given is counted from what it owed when it went silent:
    the clients of a hung worker, sending on, must not keep it alive."""
    settings = PoolSettings(model="checksum", devices=("cpu",), step_timeout_s=0.5)
    async with WorkerPool(settings) as pool:
        (worker,) = pool.status()
        assert worker.pid is not None
        stream = pool.open_stream()
        await _sigstop(worker.pid)
        await stream.send(np.ones(8000, dtype=np.int16))  # 0.5 s: it owes from here
        await stream.send(np.ones(16000 * 10, dtype=np.int16))  # 10 s more, while silent
        with within(10), pytest.raises(WorkerError, match="ASR_WORKER_STEP") as info:
            await stream.receive()
        assert "sent no result for 1 s" in str(info.value)
        assert "+ 0.5 s of audio owed" in str(info.value)
        await stream.aclose()


@pytest.mark.slow
async def test_an_offline_workers_final_piece_owes_the_whole_utterance(
    tiny_offline_model: Path,
) -> None:
    """A whole-utterance engine decodes at the final piece: its hang timeout counts the
    stream's whole audio then, however small that piece."""
    settings = PoolSettings(
        model=str(tiny_offline_model), kind=Role.OFFLINE, devices=("cpu",), step_timeout_s=0.5
    )
    async with WorkerPool(settings) as pool:
        (worker,) = pool.status()
        assert worker.pid is not None
        stream = pool.open_stream()
        await _sigstop(worker.pid)
        await stream.send(np.ones(16000, dtype=np.int16))  # 1 s: owed from here
        await stream.send(np.ones(16000, dtype=np.int16))
        await stream.finish(np.ones(8000, dtype=np.int16))  # the decode of all 2.5 s
        with within(15), pytest.raises(WorkerError, match="ASR_WORKER_STEP") as info:
            await stream.receive()
        assert "+ 3.5 s of audio owed" in str(info.value)  # the first second, then all 2.5
        await stream.aclose()


def test_the_hang_timeout_grows_with_the_audio_owed() -> None:
    settings = PoolSettings(step_timeout_s=60.0)
    assert settings.hang_timeout_s(0.0) == 60.0
    assert settings.hang_timeout_s(300.0) == 360.0  # a 5-minute utterance decoded whole
    slower = PoolSettings(step_timeout_s=10.0, step_seconds_per_audio_second=0.5)
    assert slower.hang_timeout_s(30.0) == 25.0
    fixed = PoolSettings(step_seconds_per_audio_second=0.0)
    assert fixed.hang_timeout_s(1000.0) == fixed.step_timeout_s


def test_the_seconds_per_audio_second_come_from_the_environment() -> None:
    variable = "ASR_WORKER_STEP_SECONDS_PER_AUDIO_SECOND"
    assert PoolSettings.from_env({}).step_seconds_per_audio_second == 1.0
    assert PoolSettings.from_env({variable: "0"}).step_seconds_per_audio_second == 0.0
    assert PoolSettings.from_env({variable: "2.5"}).step_seconds_per_audio_second == 2.5
    for bad in ("-1", "nan", "fast"):
        with pytest.raises(ValueError, match=variable):
            PoolSettings.from_env({variable: bad})


def test_the_unhealthy_bound_comes_from_the_environment() -> None:
    assert PoolSettings.from_env({}).unhealthy_after_s == 60.0
    assert PoolSettings.from_env({"ASR_UNHEALTHY_AFTER": "5"}).unhealthy_after_s == 5.0
    with pytest.raises(ValueError, match="ASR_UNHEALTHY_AFTER"):
        PoolSettings.from_env({"ASR_UNHEALTHY_AFTER": "0"})
