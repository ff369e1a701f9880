"""The parent's end of a results pipe: a batch of any size arrives whole from a pipe that
never blocks, messages sent before the worker closed its end are read before the EOF, and
a descriptor closed under the reader fails its read."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import select
import threading
from multiprocessing.connection import Connection

import numpy as np
import pytest

from shared.messages import (
    MAX_VOICEPRINT_DIMS,
    MAX_VOICEPRINTS,
    Decoded,
    SlotsFreed,
    SpeakerTurn,
    StreamResult,
    WorkerMessage,
)
from workers.ipc.results import ResultReader, unpickle_batch

WAIT_S = 10.0


def _read_until(
    reader: ResultReader, count: int
) -> tuple[list[tuple[WorkerMessage, ...]], bool, int]:
    """Batches until ``count`` arrived or EOF; and how many reads found only part of one."""
    batches: list[tuple[WorkerMessage, ...]] = []
    ended = False
    partial_reads = 0
    while len(batches) < count and not ended:
        readable, _, _ = select.select([reader.fileno()], [], [], WAIT_S)
        assert readable, "nothing arrived"
        payloads, ended = reader.read()
        partial_reads += not payloads
        batches += [unpickle_batch(payload) for payload in payloads]
    return batches, ended, partial_reads


def _pipe() -> tuple[Connection, Connection]:
    receiving, sending = multiprocessing.Pipe(duplex=False)
    return receiving, sending


def test_a_batch_many_times_the_pipe_arrives_whole_from_a_reader_that_never_blocks() -> None:
    receiving, sending = _pipe()
    reader = ResultReader(receiving)
    big = StreamResult(7, 3, Decoded("字" * 400_000), is_final=False)  # 1.2 MB of UTF-8
    batches = [(big, SlotsFreed((1, 2))), (StreamResult(8, 0, Decoded("small"), is_final=True),)]

    # A writer that blocks whenever the pipe is full, as the worker's Connection does.
    def write() -> None:
        for batch in batches:
            sending.send(batch)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        got, ended, partial_reads = _read_until(reader, 2)
    finally:
        writer.join(WAIT_S)
        reader.close()
        sending.close()
    assert got == batches
    assert not ended
    assert partial_reads > 0  # some reads found only part of the big frame, and waited


def test_what_was_sent_before_the_end_closed_is_read_then_the_eof() -> None:
    receiving, sending = _pipe()
    reader = ResultReader(receiving)
    sending.send((SlotsFreed((0,)),))
    sending.send((SlotsFreed((1,)),))
    sending.close()
    try:
        got, ended, _ = _read_until(reader, 3)
    finally:
        reader.close()
    assert got == [(SlotsFreed((0,)),), (SlotsFreed((1,)),)]
    assert ended


def test_half_a_frame_then_the_eof_is_an_end_and_not_a_message() -> None:
    receiving, sending = _pipe()
    reader = ResultReader(receiving)
    sending.send((SlotsFreed((5,)),))
    reader_fd = reader.fileno()
    select.select([reader_fd], [], [], WAIT_S)
    try:
        data = os.read(reader_fd, 3)  # steal the frame's first bytes: what is left is cut
        assert len(data) == 3
        sending.close()
        got, ended, _ = _read_until(reader, 1)
    finally:
        reader.close()
    assert ended
    assert got == []


def test_a_read_of_a_connection_closed_under_the_reader_fails() -> None:
    receiving, sending = _pipe()
    reader = ResultReader(receiving)
    receiving.close()  # a stray close of the pool's own end
    try:
        with pytest.raises(OSError, match="closed"):
            reader.read()
        with pytest.raises(OSError, match="closed"):
            reader.fileno()
    finally:
        sending.close()


def test_a_speaker_result_with_the_most_voiceprints_arrives_whole_and_stays_small() -> None:
    rng = np.random.default_rng(0)
    voiceprints = tuple(
        tuple(float(v) for v in row) for row in rng.standard_normal((MAX_VOICEPRINTS, 192))
    )
    turns = tuple(SpeakerTurn(n * 1000, n * 1000 + 900, n) for n in range(MAX_VOICEPRINTS))
    final = StreamResult(9, 4, Decoded(speakers=turns, voiceprints=voiceprints), is_final=True)
    receiving, sending = _pipe()
    reader = ResultReader(receiving)
    writer = threading.Thread(target=sending.send, args=((final,),))
    writer.start()
    try:
        got, _, _ = _read_until(reader, 1)
    finally:
        writer.join(WAIT_S)
        reader.close()
        sending.close()
    assert got == [(final,)]
    # The bound of the field, each voiceprint as long as it may be: a few MB at most.
    widest = tuple((1.0,) * MAX_VOICEPRINT_DIMS for _ in range(MAX_VOICEPRINTS))
    assert len(pickle.dumps(Decoded(voiceprints=widest))) < 2_500_000


def test_a_result_past_the_bound_of_voiceprints_is_not_made() -> None:
    with pytest.raises(ValueError, match=f"at most {MAX_VOICEPRINTS} voiceprints"):
        Decoded(voiceprints=((1.0,),) * (MAX_VOICEPRINTS + 1))
    with pytest.raises(ValueError, match=f"at most {MAX_VOICEPRINT_DIMS} floats"):
        Decoded(voiceprints=((1.0,) * (MAX_VOICEPRINT_DIMS + 1),))
