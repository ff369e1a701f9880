"""No free file descriptor (EMFILE) at each open of a worker's start, in the parent and in
the worker, with real processes. The parent's descriptor table is filled by lowering its
soft ``RLIMIT_NOFILE`` to just above what it holds, in a fresh interpreter
(``fresh_process``): the kernel then refuses every open past those, as with a full table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.errors import WorkerLoadError
from shared.settings import PoolSettings
from tests.helpers import failing_engine
from tests.helpers.failing_engine import NO_FDS_ENV
from tests.helpers.fresh_process import findings, run_script
from tests.helpers.timing import within
from workers.pool import WorkerPool

pytestmark = pytest.mark.anyio

DESCRIPTORS = """
import resource
from workers.ipc.slab import SLAB_PREFIX

SOFT, HARD = resource.getrlimit(resource.RLIMIT_NOFILE)

def _open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False

def descriptors():
    # fstat drops the descriptor listdir itself had open while it listed.
    return sorted(fd for fd in map(int, os.listdir("/proc/self/fd")) if _open(fd))

def leaving(free):
    # The soft limit under which exactly `free` more descriptors can be opened: the kernel
    # gives the lowest free number, and none at or past the limit.
    used, limit = set(descriptors()), 0
    while True:
        if limit not in used:
            if free == 0:
                return limit
            free -= 1
        limit += 1

def children():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if parent == os.getpid():
            found.append(int(pid))
    return sorted(found)

def segments():
    mine = f"{SLAB_PREFIX}{os.getpid()}_"
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(mine))

def held():
    return {"descriptors": descriptors(), "children": children(), "segments": segments()}
"""

EVERY_OPEN = """
import numpy as np
from shared.errors import WorkerLoadError
from shared.settings import PoolSettings
from bench.common.audio import expected_checksum
from workers.pool import WorkerPool

async def main():
    settings = PoolSettings(model="checksum", devices=("cpu",))
    audio = np.arange(3000, dtype=np.int16)
    async with WorkerPool(settings) as pool:  # imports done, the resource tracker running
        await pool.transcribe(audio)
    before = held()
    errors = []
    for free in range(64):
        pool = WorkerPool(settings)
        resource.setrlimit(resource.RLIMIT_NOFILE, (leaving(free), HARD))
        try:
            await pool.start()
        except WorkerLoadError as exc:
            errors.append(str(exc))
        else:
            break
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))
        if held() != before:
            report(leaked_with=free, error=errors[-1], before=before, after=held())
            return
    else:
        report(errors=errors, started=False)
        return
    room = time.monotonic()
    served = await pool.transcribe(audio) == expected_checksum(audio)
    serving_s = time.monotonic() - room
    await pool.aclose()
    report(errors=errors, started_with=free, served=served, serving_s=serving_s,
           clean=held() == before)

if __name__ == "__main__":
    anyio.run(main)
"""


def test_no_free_descriptor_at_any_open_of_a_start_fails_in_one_line_and_leaks_nothing(
    tmp_path: Path,
) -> None:
    """Start after start with one more descriptor free each time: each open of the start
    in turn is the one refused, until the start succeeds. Each refusal is one line naming
    what could not be opened and the limit; nothing it had opened is left behind."""
    found = findings(run_script(DESCRIPTORS + EVERY_OPEN, tmp_path))
    assert "leaked_with" not in found, found
    errors = found["errors"]
    for error in errors:
        assert "\n" not in error
        assert "Too many open files" in error
        assert "(RLIMIT_NOFILE " in error
    phases = ("its results pipe", "slab in /dev/shm", "its command pipe", "spawning its process")
    for phase in phases:
        assert any(phase in error for error in errors), (phase, errors)
    assert found["served"] is True
    assert found["clean"] is True


RESTART = """
import logging, signal
import numpy as np
from shared.errors import WorkerError
from shared.settings import PoolSettings
from bench.common.audio import expected_checksum
from workers.pool import WorkerPool

failures = []

class Failures(logging.Handler):
    def emit(self, record):
        if "failed to restart" in record.getMessage():
            failures.append(record.getMessage())

logging.getLogger("workers.pool").addHandler(Failures())

async def main():
    settings = PoolSettings(model="checksum", devices=("cpu", "cpu"), unhealthy_after_s=0.5)
    audio = np.arange(40000, dtype=np.int16)
    async with WorkerPool(settings) as pool:
        await pool.transcribe(audio)
        before = held()
        victim_stream, survivor_stream = pool.open_stream(), pool.open_stream()
        victim = pool.status()[victim_stream.worker_index]
        survivor = pool.status()[survivor_stream.worker_index]
        for stream in (victim_stream, survivor_stream):
            await stream.send(audio[:8000])
            await stream.receive()
        # Every descriptor number the process may use is taken: what a dead worker's
        # handle gives back is past the limit, and no open succeeds until it is raised.
        resource.setrlimit(resource.RLIMIT_NOFILE, (3, HARD))
        try:
            os.kill(victim.pid, signal.SIGKILL)
            try:
                with within(10):
                    await victim_stream.receive()
                victim_error = None
            except WorkerError as exc:
                victim_error = str(exc)
            await victim_stream.aclose()
            await until(lambda: failures, timeout=20)
            # The other worker's stream goes on; a new session is served there meanwhile.
            await survivor_stream.finish(audio[8000:])
            finals = [r.text async for r in survivor_stream if r.is_final]
            await survivor_stream.aclose()
            meanwhile = await pool.transcribe(audio) == expected_checksum(audio)
            os.kill(survivor.pid, signal.SIGKILL)
            await until(lambda: pool.health is not None, timeout=30)
            health = pool.health
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))
        room = time.monotonic()
        with within(60):
            await pool.wait_ready()
        ready_s = time.monotonic() - room
        served = []
        async def transcribe():
            served.append(await pool.transcribe(audio) == expected_checksum(audio))
        async with anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(transcribe)
        after = held()
        report(
            victim_error=victim_error,
            failure=failures[0],
            survivor_ok=finals == [expected_checksum(audio)],
            meanwhile=meanwhile,
            health=health,
            ready_s=ready_s,
            served=served,
            restarts=[w.restarts for w in pool.status()],
            healthy=pool.health is None,
            descriptors=[len(before["descriptors"]), len(after["descriptors"])],
        )

if __name__ == "__main__":
    anyio.run(main)
"""


def test_a_restart_with_no_free_descriptor_is_retried_and_reported(tmp_path: Path) -> None:
    found = findings(run_script(DESCRIPTORS + RESTART, tmp_path))
    assert "died" in found["victim_error"]
    assert "Too many open files" in found["failure"]
    assert "(RLIMIT_NOFILE 3)" in found["failure"]
    assert found["survivor_ok"] is True
    assert found["meanwhile"] is True
    assert "every restart fails" in found["health"]
    assert "Too many open files" in found["health"]
    assert found["served"] == [True] * 4
    assert found["restarts"] == [1, 1]
    assert found["healthy"] is True
    before, after = found["descriptors"]
    assert after == before  # the same pipes and slabs again, none from a failed attempt


@pytest.mark.parametrize("needs", ["model", "slab"])
async def test_a_worker_with_no_free_descriptor_fails_to_load_in_one_line(
    needs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's own opens: its model files (here, its loader opening one) and its
    slab, which it maps after loading its engine."""
    monkeypatch.setenv(NO_FDS_ENV, needs)  # the spawned worker inherits it
    pool = WorkerPool(
        PoolSettings(model="checksum", devices=("cpu",)), engine_loader=failing_engine.load
    )
    with within(30), pytest.raises(WorkerLoadError) as info:
        await pool.start()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("worker 0 failed to load: ")
    assert "Too many open files" in message
    assert ("failing_engine.py" if needs == "model" else "its slab") in message
