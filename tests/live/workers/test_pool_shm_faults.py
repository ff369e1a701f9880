"""``/dev/shm`` without room for a worker's slab, with real workers, each in a private mount
namespace where ``/dev/shm`` is a small tmpfs (``fresh_process``).

A segment of tmpfs is only given its pages as they are first touched: a slab created with
``ftruncate`` alone succeeds on a full ``/dev/shm``, and the parent's first write into it
is a SIGBUS that ends the whole server. So the slab is allocated whole when it is made.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.fresh_process import findings, run_script

STARTUP = """
import subprocess
import numpy as np
from shared.errors import WorkerLoadError
from shared.settings import PoolSettings
from bench.common.audio import expected_checksum
from workers.pool import WorkerPool

async def main():
    settings = PoolSettings(model="checksum", devices=("cpu",))  # a 2 MiB slab
    try:
        async with WorkerPool(settings) as pool:
            # 70 s of audio touch every slot: a SIGBUS here, had the slab no pages behind it
            await pool.transcribe(np.ones(16000 * 70, dtype=np.int16))
        error = None
    except WorkerLoadError as exc:
        error = str(exc)
    left = sorted(os.listdir("/dev/shm"))
    subprocess.run(["mount", "-o", "remount,size=8m", "/dev/shm"], check=True)
    roomy = time.monotonic()
    async with WorkerPool(settings) as pool:
        audio = np.arange(16000, dtype=np.int16)
        served = await pool.transcribe(audio) == expected_checksum(audio)
        started_s = time.monotonic() - roomy
    report(error=error, left=left, served=served, started_s=started_s,
           after=sorted(os.listdir("/dev/shm")))

if __name__ == "__main__":
    anyio.run(main)
"""


def test_no_room_for_the_slab_fails_start_up_in_one_line_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    found = findings(run_script(STARTUP, tmp_path, tmpfs={"/dev/shm": "1m"}))
    error = found["error"]
    assert error is not None, "the pool started without room for its slab"
    assert "\n" not in error
    assert "/dev/shm" in error
    assert "2 MiB" in error  # the size it needed
    assert "No space left on device" in error
    assert "ASR_SLOT_BYTES" in error
    assert "ASR_SLOTS_PER_WORKER" in error
    assert found["left"] == []  # no segment, whole or partial
    assert found["served"] is True  # with room, the next start serves
    assert found["after"] == []


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

def fill(path):
    # Every page /dev/shm has left, in a file of its own.
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    size, step = 0, 1 << 16
    while step >= 4096:
        try:
            os.posix_fallocate(fd, size, step)
            size += step
        except OSError:
            step //= 2
    os.close(fd)

async def main():
    settings = PoolSettings(model="checksum", devices=("cpu", "cpu"), unhealthy_after_s=0.5)
    audio = np.arange(40000, dtype=np.int16)
    async with WorkerPool(settings) as pool:
        victim_stream, survivor_stream = pool.open_stream(), pool.open_stream()
        victim = pool.status()[victim_stream.worker_index]
        survivor = pool.status()[survivor_stream.worker_index]
        for stream in (victim_stream, survivor_stream):
            await stream.send(audio[:8000])
            await stream.receive()
        # The slabs of today's workers keep their pages while these are open: what a
        # killed worker gives back cannot go to its replacement.
        held = [os.open("/dev/shm/" + name, os.O_RDONLY) for name in os.listdir("/dev/shm")]
        fill("/dev/shm/filler")
        os.kill(victim.pid, signal.SIGKILL)
        try:
            with within(10):
                await victim_stream.receive()
            victim_error = None
        except WorkerError as exc:
            victim_error = str(exc)
        await victim_stream.aclose()
        await until(lambda: failures, timeout=20)
        # The other worker's stream goes on, and a new session is served there meanwhile.
        await survivor_stream.finish(audio[8000:])
        finals = [r.text async for r in survivor_stream if r.is_final]
        await survivor_stream.aclose()
        meanwhile = await pool.transcribe(audio) == expected_checksum(audio)
        os.kill(survivor.pid, signal.SIGKILL)
        await until(lambda: pool.health is not None, timeout=30)
        health = pool.health

        for fd in held:
            os.close(fd)
        os.unlink("/dev/shm/filler")
        room = time.monotonic()
        with within(60):
            await pool.wait_ready()
        ready_s = time.monotonic() - room
        async with anyio.create_task_group() as group:
            served = []
            async def transcribe():
                served.append(await pool.transcribe(audio) == expected_checksum(audio))
            for _ in range(4):
                group.start_soon(transcribe)
        status = pool.status()
        report(
            victim_error=victim_error,
            failure=failures[0],
            survivor_ok=finals == [expected_checksum(audio)],
            meanwhile=meanwhile,
            health=health,
            ready_s=ready_s,
            served=served,
            restarts=[w.restarts for w in status],
            healthy=pool.health is None,
        )
    print("left", sorted(os.listdir("/dev/shm")))

if __name__ == "__main__":
    anyio.run(main)
"""


def test_a_replacement_without_room_for_its_slab_is_retried_and_reported(
    tmp_path: Path,
) -> None:
    completed = run_script(RESTART, tmp_path, tmpfs={"/dev/shm": "8m"})
    found = findings(completed)
    assert "died" in found["victim_error"]
    assert "/dev/shm" in found["failure"]
    assert "No space left on device" in found["failure"]
    assert found["survivor_ok"] is True
    assert found["meanwhile"] is True
    health = found["health"]
    assert "every restart fails" in health
    assert "/dev/shm" in health
    assert found["served"] == [True] * 4
    assert found["restarts"] == [1, 1]
    assert found["healthy"] is True
    assert "left []" in completed.stdout  # nothing of the pool's, nor the filler
