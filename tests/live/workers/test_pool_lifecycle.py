"""Start, death, replacement and stop of real worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import numpy as np
import pytest
from anyio import wait_all_tasks_blocked

from bench.common.audio import expected_checksum
from shared.errors import WorkerError, WorkerLoadError
from shared.settings import PoolSettings
from tests.helpers import failing_engine
from tests.helpers.failing_engine import EXIT_LOAD_ENV
from tests.helpers.timing import within
from workers.ipc.slab import SLAB_PREFIX
from workers.pool import WorkerPool

pytestmark = pytest.mark.anyio


def _our_segments(pid: int | None = None) -> set[str]:
    """Slabs created by process ``pid`` (this one by default): slab names carry the
    creator's pid, so other test runs on the machine do not disturb the count."""
    prefix = f"{SLAB_PREFIX}{pid or os.getpid()}_"
    return {name for name in os.listdir("/dev/shm") if name.startswith(prefix)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): look at its state.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def _two_checksum_workers() -> PoolSettings:
    return PoolSettings(model="checksum", devices=("cpu", "cpu"))


async def test_stop_leaves_no_process_and_no_segment() -> None:
    before = _our_segments()
    async with WorkerPool(_two_checksum_workers()) as pool:
        pids = [w.pid for w in pool.status()]
        assert len(_our_segments() - before) == 2
        await pool.transcribe(np.ones(100, dtype=np.int16))
    assert all(pid is not None and not _alive(pid) for pid in pids)
    assert _our_segments() == before


async def test_a_stop_while_a_replacement_loads_stops_it_without_the_kill() -> None:
    """A stop asked while a worker loads is sent once it is ready: the pool does not wait
    out ASR_WORKER_STOP_TIMEOUT (a minute here) for a worker that was never told to stop."""
    settings = PoolSettings(model="checksum", devices=("cpu",), stop_timeout_s=60.0)
    async with WorkerPool(settings) as pool:
        pid = pool.status()[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with within(10):
            while not _loading_a_replacement(pool, pid):  # noqa: ASYNC110 (another process)
                await anyio.sleep(0.002)
        replacement = pool.status()[0].pid
        stop_asked = time.monotonic()
    # The stop is shielded from cancellation: its length tells whether the worker was told.
    assert time.monotonic() - stop_asked < settings.stop_timeout_s / 2
    assert replacement is not None
    assert not _alive(replacement)


def _loading_a_replacement(pool: WorkerPool, lost_pid: int) -> bool:
    (worker,) = pool.status()
    return worker.pid != lost_pid and worker.state == "starting"


async def test_sigkill_mid_stream_fails_only_that_workers_streams() -> None:
    before = _our_segments()
    async with WorkerPool(_two_checksum_workers()) as pool:
        victim_stream = pool.open_stream()
        survivor_stream = pool.open_stream()
        assert victim_stream.worker_index != survivor_stream.worker_index
        audio = np.arange(20000, dtype=np.int16)
        await victim_stream.send(audio[:5000])
        await survivor_stream.send(audio[:5000])
        assert not (await victim_stream.receive()).is_final
        assert not (await survivor_stream.receive()).is_final

        victim = pool.status()[victim_stream.worker_index]
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        with within(1.0), pytest.raises(WorkerError, match="died"):
            await victim_stream.receive()
        with pytest.raises(WorkerError):
            await victim_stream.send(audio[5000:])
        await victim_stream.aclose()

        # The other worker's stream goes on untouched and verifies.
        await survivor_stream.finish(audio[5000:])
        with within(10):
            result = await survivor_stream.receive()
        assert result.is_final
        assert result.text == expected_checksum(audio)
        await survivor_stream.aclose()

        # A replacement comes up in the victim's place.
        with within(30):
            await pool.wait_ready()
        replaced = pool.status()[victim.index]
        assert replaced.restarts == 1
        assert replaced.pid != victim.pid
        assert await pool.transcribe(audio) == expected_checksum(audio)
        # Its predecessor's slab is gone already; the new one exists.
        assert len(_our_segments() - before) == 2
    assert _our_segments() == before


async def test_load_error_fails_loudly_with_the_workers_own_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.yaml").write_text("model: ParaformerStreaming\n")
    before = _our_segments()
    settings = PoolSettings(model=str(broken), devices=("cpu", "cpu"), start_timeout_s=120)
    with within(120), pytest.raises(WorkerLoadError, match="failed to load") as info:
        async with WorkerPool(settings):
            pass
    # The worker's own exception text reaches the caller.
    assert "Error" in str(info.value)
    assert _our_segments() == before


async def test_a_worker_that_exits_before_it_is_ready_fails_start_up_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EXIT_LOAD_ENV, "1")  # the spawned worker inherits it
    before = _our_segments()
    settings = PoolSettings(model="checksum", devices=("cpu",))
    with (
        within(60),
        pytest.raises(WorkerLoadError, match=r"exited while loading \(exit code 3\)"),
    ):
        async with WorkerPool(settings, engine_loader=failing_engine.load):
            pass
    assert _our_segments() == before


async def test_unknown_model_directory_fails_fast() -> None:
    with within(5), pytest.raises(WorkerLoadError, match="no such directory"):
        async with WorkerPool(PoolSettings(model="/nonexistent/model")):
            pass


def test_no_resource_tracker_warning_and_clean_exit(tmp_path: Path) -> None:
    """A whole life cycle in a fresh interpreter, including a SIGKILLed worker: stderr
    must carry no resource-tracker complaint and /dev/shm must end clean."""
    script = tmp_path / "life.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal
            import anyio, numpy as np
            from shared.settings import PoolSettings
            from tests.helpers.timing import within
            from workers.pool import WorkerPool

            async def main() -> None:
                settings = PoolSettings(model="checksum", devices=("cpu", "cpu"))
                async with WorkerPool(settings) as pool:
                    await pool.transcribe(np.ones(1000, dtype=np.int16))
                    os.kill(pool.status()[0].pid, signal.SIGKILL)
                    with within(30):
                        while pool.status()[0].restarts < 1:
                            await anyio.sleep(0.05)
                        await pool.wait_ready()
                    await pool.transcribe(np.ones(1000, dtype=np.int16))
                print(os.getpid())

            if __name__ == "__main__":
                anyio.run(main)
            """
        )
    )
    completed = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[3],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    child_pid = int(completed.stdout.strip())
    assert "leaked" not in completed.stderr
    assert "resource_tracker" not in completed.stderr
    assert _our_segments(child_pid) == set()


async def test_a_hung_worker_is_killed_and_replaced() -> None:
    """SIGSTOP stands in for a worker stuck in native code: alive, silent, owing results."""
    settings = PoolSettings(model="checksum", devices=("cpu", "cpu"), step_timeout_s=1.0)
    async with WorkerPool(settings) as pool:
        victim_stream = pool.open_stream()
        survivor_stream = pool.open_stream()
        audio = np.arange(20000, dtype=np.int16)
        await victim_stream.send(audio[:5000])
        assert not (await victim_stream.receive()).is_final
        victim = pool.status()[victim_stream.worker_index]
        assert victim.pid is not None

        # A worker that owes nothing is never taken for hung, however long it is quiet:
        # this sleep is that quiet, twice the step timeout, and is what is under test.
        os.kill(victim.pid, signal.SIGSTOP)
        await anyio.sleep(2 * settings.step_timeout_s)
        assert pool.status()[victim_stream.worker_index].pid == victim.pid

        await victim_stream.send(audio[5000:10000])  # now it owes an answer
        with (
            within(5.0),
            pytest.raises(WorkerError, match="ASR_WORKER_STEP_TIMEOUT") as info,
        ):
            await victim_stream.receive()
        # The timeout grows with the audio owed (5,000 samples here): both settings named,
        # and the sum the watchdog waited. How soon it acts past that is bench.reliability.faults'.
        message = str(info.value)
        assert "sent no result for 1.31 s and was killed" in message
        assert "ASR_WORKER_STEP_TIMEOUT 1 s + 0.312 s of audio owed" in message
        assert "x ASR_WORKER_STEP_SECONDS_PER_AUDIO_SECOND 1" in message
        await victim_stream.aclose()
        assert not _alive(victim.pid)

        await survivor_stream.finish(audio)
        with within(10):
            results = [r async for r in survivor_stream]
        assert results[-1].text == expected_checksum(audio)

        with within(30):
            await pool.wait_ready()
        replaced = pool.status()[victim_stream.worker_index]
        assert replaced.restarts == 1
        assert replaced.pid != victim.pid


def _raise_timeout(signum: int, frame: object) -> None:
    raise TimeoutError("the event loop was blocked")


async def test_a_worker_that_stops_reading_never_blocks_the_event_loop() -> None:
    """Thousands of OPEN/CLOSE headers (not bounded by slot credits) to a stopped worker:
    more than its pipe holds. They wait in the parent, in order, and reach it when it runs
    again. A blocking write would freeze the loop: SIGALRM breaks such a test instead of
    letting it hang."""
    async with WorkerPool(PoolSettings(model="checksum", devices=("cpu",))) as pool:
        (worker,) = pool.status()
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGSTOP)
        previous = signal.signal(signal.SIGALRM, _raise_timeout)
        signal.alarm(30)
        try:
            for _ in range(4000):  # 8,000 headers of 44 bytes: 352 kB against a 64 KiB pipe
                stream = pool.open_stream()
                await stream.aclose()
            # The loop goes on, and nothing spins on the full pipe: every other task comes
            # to wait (the pending headers' writer for the pipe to drain).
            with within(5):
                await wait_all_tasks_blocked()
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            os.kill(worker.pid, signal.SIGCONT)  # else a failed test would hang at the stop
        audio = np.arange(3000, dtype=np.int16)
        with within(30):
            assert await pool.transcribe(audio) == expected_checksum(audio)
        (after,) = pool.status()
        assert after.pid == worker.pid  # it owed no result: not taken for hung
        assert after.active_streams == 0


async def test_a_worker_slower_than_the_start_timeout_fails_in_one_line() -> None:
    # Spawning a worker and importing its modules takes well over 10 ms.
    settings = PoolSettings(model="checksum", devices=("cpu",), start_timeout_s=0.01)
    before = _our_segments()
    with pytest.raises(WorkerLoadError, match="ASR_WORKER_START_TIMEOUT"):
        await WorkerPool(settings).start()
    assert _our_segments() == before
