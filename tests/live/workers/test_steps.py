"""How a worker composes its steps: one chunk per stream, order kept within each stream."""

from __future__ import annotations

import os
import signal

import anyio
import numpy as np
import pytest

from shared.settings import PoolSettings
from workers.ipc.receiver import Command
from workers.ipc.wire import FLAG_FINAL, CommandHeader, CommandKind
from workers.pool import WorkerPool
from workers.worker.steps import PendingCommands

AUDIO = np.zeros(4, dtype=np.int16)


def audio(stream_id: int, seq: int, final: bool = False) -> Command:
    flags = FLAG_FINAL if final else 0
    return Command(CommandHeader(CommandKind.AUDIO, stream_id, seq, flags=flags), AUDIO)


def control(kind: CommandKind, stream_id: int = 0) -> Command:
    return Command(CommandHeader(kind, stream_id))


def described(step: list[Command]) -> list[tuple[str, int, int]]:
    return [(c.header.kind.name, c.header.stream_id, c.header.seq) for c in step]


def test_a_step_takes_one_chunk_of_each_stream_and_keeps_the_rest_in_order() -> None:
    pending = PendingCommands(one_chunk_per_stream=True)
    pending.extend(
        [
            control(CommandKind.OPEN, 1),
            audio(1, 0),
            audio(1, 1),
            control(CommandKind.OPEN, 2),
            audio(1, 2),
            audio(2, 0),
            control(CommandKind.CLOSE, 1),
            audio(2, 1, final=True),
        ]
    )
    assert described(pending.take_step(max_batch=32)) == [
        ("OPEN", 1, 0),
        ("AUDIO", 1, 0),
        ("OPEN", 2, 0),
        ("AUDIO", 2, 0),
    ]
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 1, 1), ("AUDIO", 2, 1)]
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 1, 2)]
    # Behind the stream's last chunk, as it was sent: dropped once that chunk is done.
    assert described(pending.take_step(max_batch=32)) == [("CLOSE", 1, 0)]
    assert len(pending) == 0
    assert pending.take_step(max_batch=32) == []


def test_max_batch_caps_the_chunks_and_the_others_go_first_next_time() -> None:
    pending = PendingCommands(one_chunk_per_stream=True)
    pending.extend([audio(s, 0) for s in range(5)] + [audio(s, 1) for s in range(5)])
    first = pending.take_step(max_batch=3)
    assert described(first) == [("AUDIO", s, 0) for s in range(3)]
    second = pending.take_step(max_batch=3)
    # Streams 3 and 4 were waiting longest: their first chunks lead.
    assert described(second) == [("AUDIO", 3, 0), ("AUDIO", 4, 0), ("AUDIO", 0, 1)]


def test_a_stop_waits_for_everything_received_before_it() -> None:
    pending = PendingCommands(one_chunk_per_stream=True)
    pending.extend([audio(1, 0), audio(1, 1), control(CommandKind.STOP)])
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 1, 0)]
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 1, 1), ("STOP", 0, 0)]


def test_whole_utterance_engines_take_every_piece_at_once() -> None:
    pending = PendingCommands(one_chunk_per_stream=False)
    pending.extend([audio(1, 0), audio(1, 1), audio(1, 2, final=True), audio(2, 0)])
    assert len(pending.take_step(max_batch=32)) == 4
    pending.extend([audio(3, k) for k in range(5)])
    assert len(pending.take_step(max_batch=2)) == 2  # the cap still holds
    assert len(pending) == 3


@pytest.mark.anyio
async def test_a_stream_with_a_backlog_does_not_make_another_wait_behind_it() -> None:
    # Stream 0 has ten chunks waiting, stream 1 one (sent while the worker is stopped, so
    # that all of them wait together): no step holds two chunks of one stream, so the lone
    # chunk shares the first step.
    chunk = np.arange(9600, dtype=np.int16)
    settings = PoolSettings(model="checksum", devices=("cpu",))
    async with WorkerPool(settings) as pool:
        backlog, lone = pool.open_stream(), pool.open_stream()
        (worker,) = pool.status()
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            with anyio.fail_after(10):
                for _ in range(10):
                    await backlog.send(chunk)
                await lone.send(chunk)
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        with anyio.fail_after(10):
            lone_result = await lone.receive()
            backlog_results = [await backlog.receive() for _ in range(10)]
        assert [r.seq for r in backlog_results] == list(range(10))
        assert lone_result.batch_size == 2
        assert max(r.batch_size for r in backlog_results) == 2
        await backlog.aclose()
        await lone.aclose()
