"""sherpa-onnx's online WebSocket protocol as the load generator speaks it: its frames
parsed, each result placed on the audio it waited for, and one stream against a stand-in
server that answers as sherpa's does."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve

from bench.load.sherpa_protocol import (
    END_ACK,
    END_OF_AUDIO,
    EndAck,
    ProtocolError,
    SherpaResult,
    audio_frame,
    parse,
    samples_needed,
)
from bench.load.sherpa_stream import receive, run_sherpa_stream
from bench.load.ws_stream import SendLog, StreamRecord
from tests.helpers.timing import within

TAIL_PADDING = 12800  # the server's --end-tail-padding, 0.8 s


def _result(text: str, last: bool = False, segment: int = 0) -> str:
    """A result as the server's ``AsJsonString`` writes it."""
    fields = {
        "text": text,
        "tokens": list(text),
        "timestamps": [],
        "ys_probs": [],
        "lm_probs": [],
        "context_scores": [],
        "segment": segment,
        "words": [],
        "start_time": 0.0,
        "is_final": last,
        "is_eof": last,
    }
    return json.dumps(fields)


def test_a_result_is_parsed() -> None:
    assert parse(_result("你好", segment=2)) == SherpaResult("你好", 2, False, False)
    assert parse(_result("", last=True)) == SherpaResult("", 0, True, True)


def test_done_is_the_end() -> None:
    assert parse(END_ACK) == EndAck()


@pytest.mark.parametrize("frame", [b"\x00\x01", "Done?", "[1, 2]", '{"segment": 0}'])
def test_anything_else_is_a_protocol_error(frame: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        parse(frame)


def test_a_step_waits_for_its_61_frames_and_one_more() -> None:
    # 61 windows of 400 samples at a 160 shift end at 60 * 160 + 400 = 10000; the 62nd
    # ends 160 later. Then every 60 frames: 9600 samples, 600 ms.
    assert samples_needed(0) == 10160
    assert samples_needed(1) - samples_needed(0) == 9600
    assert samples_needed(24) == 240560  # past 15 s of audio: the tail padding's step


def test_audio_goes_as_float32_in_full_scale() -> None:
    frame = audio_frame(np.array([-32768, 0, 16384], dtype=np.int16))
    assert np.frombuffer(frame, "<f4").tolist() == [-1.0, 0.0, 0.5]


class _Replies:
    """A connection that gives back the server's frames, in order."""

    def __init__(self, frames: list[str]) -> None:
        self._frames: Iterator[str] = iter(frames)

    async def recv(self) -> str:
        return next(self._frames)


@pytest.mark.anyio
async def test_each_result_is_timed_from_the_frame_its_step_waited_for() -> None:
    """2.04 s in 60 ms frames, each sent a second after the one before: steps 0, 1 and 2
    wait for frames 11, 21 and 31 (samples 10560, 20160, 29760); step 3 falls in the tail
    padding, after Done, and times the final instead."""
    base = time.perf_counter() - 1000
    sent = SendLog()
    for k in range(1, 35):
        sent.record(960 * k, base + k)
    record = StreamRecord(0)
    frames = [_result("a"), _result("ab"), _result("abc"), _result("abcd"), _result("", True)]
    await receive(_Replies(frames), record, base, sent, [base + 35], timeout=1)
    assert [round(x) for x in record.chunk_latencies_s] == [989, 979, 969]
    assert record.answered_in_order == 4
    assert record.final_s is not None
    assert round(record.final_s) == 965
    assert record.error is None


@pytest.mark.anyio
async def test_done_ends_a_stream_whose_last_result_raced_the_end() -> None:
    """The last step taken up before the server marked the stream ended: no is_eof on its
    result, Done! right after it."""
    base = time.perf_counter() - 100
    sent = SendLog()
    sent.record(16000, base)
    record = StreamRecord(0)
    await receive(_Replies([_result("a"), _result("ab"), END_ACK]), record, base, sent, [base], 1)
    assert len(record.chunk_latencies_s) == 1  # step 1 needs 19760 samples: the tail's
    assert record.final_s is not None
    assert record.answered_in_order == 2


async def _stand_in(ws: ServerConnection) -> None:
    """sherpa's server as far as the probe sees it: a result per decode step, in order,
    each step taken up once its samples are in; Done adds the tail padding, the last step
    is the eof, then Done!."""
    received = step = 0
    async for message in ws:
        if isinstance(message, bytes):
            received += len(message) // 4
        elif message == END_OF_AUDIO:
            received += TAIL_PADDING
        ready = []
        while samples_needed(step) <= received:
            ready.append(step)
            step += 1
        for each in ready:
            last = message == END_OF_AUDIO and each == ready[-1]
            await ws.send(_result("字" * each, last))
        if message == END_OF_AUDIO:
            await ws.send(END_ACK)


@pytest.mark.anyio
async def test_a_stream_against_a_stand_in_server() -> None:
    async with serve(_stand_in, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        args = argparse.Namespace(
            url=f"ws://127.0.0.1:{port}/",
            chunk_size="5,10,5",
            chunk_interval=10,
            fast=True,
            timeout=5.0,
        )
        record = StreamRecord(0)
        audio = np.zeros(32000, dtype=np.int16)  # 2 s: steps 0-2 within it
        with within(10):
            await run_sherpa_stream(0, args, audio, record)
    assert record.error is None
    assert len(record.chunk_latencies_s) == 3
    assert record.first_partial_s is not None
    assert record.final_s is not None
    assert record.audio_seconds == 2.0
