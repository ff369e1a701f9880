"""Workers and signals: out of the server's process group, stoppable, never orphaned.

A signal for the server's whole group (Ctrl-C, systemd's SIGTERM to the group) must not
reach the workers, which the drain still needs; a stuck worker must still be terminated;
and a worker whose server dies, even by SIGKILL, must exit.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import anyio
import numpy as np
import pytest

from bench.common.audio import expected_checksum
from shared.errors import WorkerError
from shared.settings import PoolSettings
from tests.helpers import failing_engine
from tests.helpers.failing_engine import CLOSE_RESULTS, marked
from tests.helpers.timing import within
from workers.ipc.slab import SLAB_PREFIX
from workers.pool import WorkerPool

ROOT = Path(__file__).resolve().parents[3]


def _gone(pid: int) -> bool:
    """Whether the process has exited (a zombie not yet reaped by its new parent counts)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def _until(condition: Callable[[], object], timeout: float) -> None:
    """Poll ``condition`` (the state of another process) until it holds."""
    with within(timeout):
        while True:
            if condition():
                return
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_workers_have_a_session_and_process_group_of_their_own() -> None:
    async with WorkerPool(PoolSettings(model="checksum", devices=("cpu", "cpu"))) as pool:
        for worker in pool.status():
            assert worker.pid is not None
            assert os.getsid(worker.pid) == worker.pid
            assert os.getpgid(worker.pid) == worker.pid != os.getpgid(0)


@pytest.mark.anyio
async def test_sigint_is_ignored_and_sigterm_ends_a_worker() -> None:
    async with WorkerPool(PoolSettings(model="checksum", devices=("cpu",))) as pool:
        (worker,) = pool.status()
        assert worker.pid is not None
        audio = np.arange(3000, dtype=np.int16)
        os.kill(worker.pid, signal.SIGINT)
        assert await pool.transcribe(audio) == expected_checksum(audio)
        assert pool.status()[0].pid == worker.pid

        os.kill(worker.pid, signal.SIGTERM)
        await _until(lambda: pool.status()[0].restarts == 1, timeout=30)
        with within(30):
            await pool.wait_ready()
        assert await pool.transcribe(audio) == expected_checksum(audio)


@pytest.mark.anyio
async def test_a_stuck_worker_is_terminated_by_its_reap() -> None:
    """A worker that closed its results pipe and sleeps: the reap's SIGTERM ends it."""
    settings = PoolSettings(model="checksum", devices=("cpu",))
    pool = WorkerPool(settings, engine_loader=failing_engine.load)
    async with pool, pool.open_stream() as stream:
        await stream.send(marked(CLOSE_RESULTS))
        with within(30), pytest.raises(WorkerError, match=r"exit code -15\b"):
            await stream.receive()


SCRIPT = """
import os, sys
import anyio
from shared.settings import PoolSettings
from workers.pool import WorkerPool

async def main() -> None:
    settings = PoolSettings(model="checksum", devices=("cpu", "cpu"), transport=sys.argv[1])
    async with WorkerPool(settings) as pool:
        print(*(worker.pid for worker in pool.status()), flush=True)
        await anyio.sleep_forever()

if __name__ == "__main__":
    anyio.run(main)
"""


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["shm", "queue"])
async def test_workers_exit_when_their_server_is_sigkilled(tmp_path: Path, transport: str) -> None:
    script = tmp_path / "server.py"
    script.write_text(textwrap.dedent(SCRIPT))
    command = [sys.executable, str(script), transport]
    async with await anyio.open_process(command, cwd=ROOT, start_new_session=True) as server:
        assert server.stdout is not None
        assert server.stderr is not None
        with within(60):
            line = b""
            while not line.endswith(b"\n"):
                line += await server.stdout.receive()
        pids = [int(pid) for pid in line.split()]
        assert len(pids) == 2, line
        assert not any(_gone(pid) for pid in pids)
        server.kill()
        await server.wait()
        # Their pipes to the server end: each worker exits by itself, no one signals it.
        await _until(lambda: all(_gone(pid) for pid in pids), timeout=20)
        # The server's resource tracker unlinks the slabs it could not.
        prefix = f"{SLAB_PREFIX}{server.pid}_"
        await _until(
            lambda: not any(name.startswith(prefix) for name in os.listdir("/dev/shm")),
            timeout=20,
        )
        stderr = b""
        with within(20):
            async for data in server.stderr:
                stderr += data
        assert b"Traceback" not in stderr, stderr.decode(errors="replace")
