"""How a worker composes its steps (sans I/O): one chunk per stream, order kept within each
stream, a stop behind everything before it, and a close taking out its stream's audio that
still waits."""

from __future__ import annotations

import numpy as np

from workers.ipc.receiver import Command
from workers.ipc.wire import FLAG_FINAL, CommandHeader, CommandKind
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
            audio(1, 2, final=True),
            audio(2, 0),
            control(CommandKind.CLOSE, 3),
            audio(2, 1, final=True),
        ]
    )
    assert described(pending.take_step(max_batch=32)) == [
        ("OPEN", 1, 0),
        ("AUDIO", 1, 0),
        ("OPEN", 2, 0),
        ("AUDIO", 2, 0),
        ("CLOSE", 3, 0),
    ]
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 1, 1), ("AUDIO", 2, 1)]
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 1, 2)]
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


def test_a_close_takes_its_streams_waiting_audio_out_and_says_how_many() -> None:
    pending = PendingCommands(one_chunk_per_stream=True)
    assert pending.extend([audio(1, k) for k in range(4)] + [audio(2, 0), audio(2, 1)]) == []
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 1, 0), ("AUDIO", 2, 0)]
    # The client of stream 1 has gone: its three pieces still waiting are nobody's now.
    assert pending.extend([control(CommandKind.CLOSE, 1), audio(2, 2)]) == [1, 1, 1]
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 2, 1), ("CLOSE", 1, 0)]
    assert described(pending.take_step(max_batch=32)) == [("AUDIO", 2, 2)]
    assert len(pending) == 0


def test_a_close_received_with_its_streams_audio_takes_that_audio_out_too() -> None:
    pending = PendingCommands(one_chunk_per_stream=False)
    arrived = [control(CommandKind.OPEN, 5), audio(5, 0), audio(5, 1, final=True)]
    assert pending.extend([*arrived, control(CommandKind.CLOSE, 5)]) == [5, 5]
    assert described(pending.take_step(max_batch=32)) == [("OPEN", 5, 0), ("CLOSE", 5, 0)]
