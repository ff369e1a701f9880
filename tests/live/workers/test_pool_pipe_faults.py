"""A worker's pipe closed under it, at either end, with real processes: that worker's
streams fail (1011), it is replaced, the other worker's streams go on, the pool lives.

The parent's end is found as the worker would see it: the pipe of this process's
``Connection`` that the worker's process holds too (``/proc/PID/fd``). It is either closed
(``Connection.close()``, as a stray close in the parent would) or replaced under the
descriptor number by a pipe whose other end is gone (as a native library closing or
reusing a wrong number would), which leaves the pool's ``Connection`` pointing at a
descriptor that never reads or takes its worker's bytes again.
"""

from __future__ import annotations

import gc
import os
from multiprocessing.connection import Connection

import anyio
import numpy as np
import pytest

from bench.common.audio import expected_checksum
from shared.errors import WorkerError
from shared.settings import PoolSettings
from tests.helpers import failing_engine
from tests.helpers.failing_engine import CLOSE_COMMANDS, HUGE_RESULT, HUGE_TEXT, marked
from tests.helpers.loops import BOTH_LOOPS
from tests.helpers.timing import within
from workers.ipc.slab import SLAB_PREFIX
from workers.pool import WorkerPool
from workers.pool.stream import AudioStream

# Under both loops: uvloop makes the pipes it polls non-blocking, asyncio leaves them as
# they are, and a pipe is all the pool reads (tests.helpers.loops).
pytestmark = [pytest.mark.anyio, BOTH_LOOPS]

AUDIO = np.arange(24000, dtype=np.int16)


def _our_segments() -> set[str]:
    prefix = f"{SLAB_PREFIX}{os.getpid()}_"
    return {name for name in os.listdir("/dev/shm") if name.startswith(prefix)}


def _pipes_of(pid: int) -> set[str]:
    pipes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if link.startswith("pipe:"):
            pipes.add(link)
    return pipes


def _parents_end(worker_pid: int, readable: bool) -> Connection:
    """This process's end of the worker's results pipe (``readable``) or command pipe."""
    theirs = _pipes_of(worker_pid)
    found = [
        thing
        for thing in gc.get_objects()
        if isinstance(thing, Connection)
        and not thing.closed
        and thing.readable is readable
        and thing.writable is not readable
        and os.readlink(f"/proc/self/fd/{thing.fileno()}") in theirs
    ]
    assert len(found) == 1, found
    return found[0]


def _replace_under(connection: Connection) -> None:
    """Put a pipe whose other end is closed under the connection's descriptor number."""
    read_end, write_end = os.pipe()
    os.dup2(read_end if connection.readable else write_end, connection.fileno())
    os.close(read_end)
    os.close(write_end)


async def _start_two(pool: WorkerPool) -> tuple[AudioStream, AudioStream]:
    first, second = pool.open_stream(), pool.open_stream()
    assert first.worker_index != second.worker_index
    for stream in (first, second):
        await stream.send(AUDIO[:8000])
        with within(10):
            assert (await stream.receive()).text == expected_checksum(AUDIO[:8000])
    return first, second


async def _send_and_receive(stream: AudioStream) -> None:
    await stream.send(AUDIO[8000:16000])
    await stream.receive()


async def _the_rest_is_served(pool: WorkerPool, survivor: AudioStream, victim: int) -> None:
    """The survivor's stream ends verified; the victim's seat has a new worker; both
    workers serve new streams; nothing is said to be wrong."""
    await survivor.finish(AUDIO[8000:])
    with within(10):
        results = [result async for result in survivor]
    assert results[-1].is_final
    assert results[-1].text == expected_checksum(AUDIO)
    await survivor.aclose()
    with within(30):
        while True:
            if pool.status()[victim].restarts == 1:
                break
            await anyio.sleep(0.01)
        await pool.wait_ready()
    served: list[int] = []

    async def transcribe() -> None:
        async with pool.open_stream() as stream:
            served.append(stream.worker_index)
            await stream.finish(AUDIO)
            assert [r.text async for r in stream][-1] == expected_checksum(AUDIO)

    with within(10):
        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(transcribe)
    assert sorted(served) == [0, 1]
    assert [worker.restarts for worker in pool.status()] == [int(i == victim) for i in (0, 1)]
    assert pool.health is None


@pytest.mark.parametrize("how", ["closed", "replaced"])
@pytest.mark.parametrize("end", ["results", "commands"])
async def test_the_parents_end_of_a_workers_pipe_gone_fails_only_its_streams(
    end: str, how: str
) -> None:
    before = _our_segments()
    async with WorkerPool(PoolSettings(model="checksum", devices=("cpu", "cpu"))) as pool:
        victim_stream, survivor = await _start_two(pool)
        victim = pool.status()[victim_stream.worker_index]
        assert victim.pid is not None
        connection = _parents_end(victim.pid, readable=end == "results")
        if how == "closed":
            connection.close()
        else:
            _replace_under(connection)
        with within(15), pytest.raises(WorkerError) as info:
            await _send_and_receive(victim_stream)
        message = str(info.value)
        assert f"worker {victim.index}" in message
        assert "died" in message or "gone" in message
        await victim_stream.aclose()
        await _the_rest_is_served(pool, survivor, victim.index)
    assert _our_segments() == before


async def test_a_worker_whose_end_of_its_command_pipe_closes_is_replaced() -> None:
    before = _our_segments()
    settings = PoolSettings(model="checksum", devices=("cpu", "cpu"))
    async with WorkerPool(settings, engine_loader=failing_engine.load) as pool:
        victim_stream, survivor = await _start_two(pool)
        victim = victim_stream.worker_index
        await victim_stream.send(marked(CLOSE_COMMANDS))
        with within(15), pytest.raises(WorkerError, match=f"worker {victim} .* died"):
            async for _ in victim_stream:
                pass
        await victim_stream.aclose()
        await _the_rest_is_served(pool, survivor, victim)
    assert _our_segments() == before


async def test_results_larger_than_the_pipe_arrive_whole_and_the_worker_lives() -> None:
    settings = PoolSettings(model="checksum", devices=("cpu",))
    async with WorkerPool(settings, engine_loader=failing_engine.load) as pool:
        (worker,) = pool.status()
        huge, plain = pool.open_stream(), pool.open_stream()
        for _ in range(4):  # four pieces: the worker may answer them in one batch of MBs
            await huge.send(marked(HUGE_RESULT))
        await plain.send(AUDIO[:8000])
        with within(20):
            texts = [(await huge.receive()).text for _ in range(4)]
            assert (await plain.receive()).text == expected_checksum(AUDIO[:8000])
        assert texts == [HUGE_TEXT] * 4
        await plain.finish(AUDIO[8000:])
        with within(10):
            assert [r.text async for r in plain][-1] == expected_checksum(AUDIO)
        await huge.aclose()
        await plain.aclose()
        (after,) = pool.status()
        assert (after.pid, after.restarts, after.state) == (worker.pid, 0, "ready")
        assert pool.health is None
