"""One stream of ``bench.load.ws_load``: a FunASR session paced in real time (or as fast as
the server takes it), what it sent and when (``SendLog``), and what it makes of each result
(``StreamRecord``: latencies, errors, refusals, and the checksum engine's verification).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import websockets

from bench.common.audio import checksum, expected_checksum

SAMPLE_RATE = 16000
BYTES_PER_SAMPLE = 2
REFUSAL_CODES = (1013, 1012)


@dataclass(slots=True)
class StreamRecord:
    index: int
    audio_seconds: float = 0.0
    first_partial_s: float | None = None
    final_s: float | None = None
    wall_s: float | None = None
    chunk_latencies_s: list[float] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    compute_ms: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)  # the worker step of each result
    refused: bool = False
    error: str | None = None
    verified: bool | None = None
    sentences: int = 0  # 2pass: 2pass-offline results
    # A server without our timing fields: partials matched to chunks in order.
    answered_in_order: int = 0
    chunks_in_order: bool = False


class SendLog:
    """When each frame's last byte was sent: the send time of any byte of the stream."""

    def __init__(self) -> None:
        self._ends: list[int] = []  # bytes sent, after each frame
        self._times: list[float] = []

    def record(self, end_byte: int, at: float) -> None:
        self._ends.append(end_byte)
        self._times.append(at)

    def time_of(self, end_byte: int) -> float | None:
        """When the byte before ``end_byte`` went out; None if it has not."""
        index = bisect.bisect_left(self._ends, end_byte)
        return self._times[index] if index < len(self._times) else None


async def run_stream(
    index: int,
    args: argparse.Namespace,
    audio: npt.NDArray[np.int16],
    record: StreamRecord,
) -> None:
    chunk_size = [int(v) for v in args.chunk_size.split(",")]
    chunk_bytes = chunk_size[1] * 960 * BYTES_PER_SAMPLE
    frame_bytes = chunk_bytes // args.chunk_interval
    pcm = audio.astype("<i2").tobytes()
    record.audio_seconds = len(audio) / SAMPLE_RATE
    config = {
        "mode": args.mode,
        "chunk_size": chunk_size,
        "chunk_interval": args.chunk_interval,
        "wav_name": f"stream-{index}",
        "is_speaking": True,
        "timing": True,
    }
    sent = SendLog()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    try:
        async with websockets.connect(
            args.url,
            subprotocols=[websockets.Subprotocol("binary")],
            additional_headers=headers,
            max_size=None,
            open_timeout=args.timeout,
        ) as ws:
            await ws.send(json.dumps(config))
            started = time.perf_counter()
            end_sent: list[float] = []

            async def send() -> None:
                for offset in range(0, len(pcm), frame_bytes):
                    frame = pcm[offset : offset + frame_bytes]
                    if not args.fast:
                        due = started + offset / BYTES_PER_SAMPLE / SAMPLE_RATE
                        await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    await ws.send(frame)
                    now = time.perf_counter()
                    sent.record(offset + len(frame), now)
                await ws.send(json.dumps({"is_speaking": False}))
                end_sent.append(time.perf_counter())

            async with asyncio.TaskGroup() as group:
                sender = group.create_task(send())
                try:
                    await receive(ws, record, started, sent, chunk_bytes, end_sent, audio, args)
                finally:
                    sender.cancel()  # done already, unless the session ended early
    except websockets.InvalidStatus as exc:
        if exc.response.status_code == 503:
            record.refused = True
        else:
            record.error = f"HTTP {exc.response.status_code}"
    except websockets.ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd else None
        if code in REFUSAL_CODES and record.first_partial_s is None:
            record.refused = True
        else:
            record.error = f"closed {code}: {exc.rcvd.reason if exc.rcvd else ''}"
    except (OSError, TimeoutError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"


async def receive(
    ws: Any,
    record: StreamRecord,
    started: float,
    sent: SendLog,
    chunk_bytes: int,
    end_sent: list[float],
    audio: npt.NDArray[np.int16],
    args: argparse.Namespace,
) -> None:
    sentence_partials: list[str] = []  # 2pass: each sentence's last partial
    partial_sentence = 0  # 2pass: the sentence of the latest partial
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), args.timeout))
        now = time.perf_counter()
        if message.get("type") == "error":
            record.error = f"{message.get('code')}: {message.get('message')}"
            if message.get("code") in REFUSAL_CODES and record.first_partial_s is None:
                record.refused, record.error = True, None
            return
        if message.get("resent"):
            continue  # partials given back after a 2pass-offline frame: no chunk's result
        mode = message.get("mode")
        if mode == "2pass-offline":
            record.sentences += 1
        elif mode == "2pass-online":
            # Our partials do not wait for the sentence before's offline result: each
            # sentence's streaming pass numbers its results (seq) from 0. FunASR's own server
            # numbers none, and sends a sentence's partials after the offline result before.
            seq = message.get("seq")
            if not isinstance(seq, int):
                partial_sentence = record.sentences
            elif seq == 0 and len(sentence_partials) > partial_sentence:
                partial_sentence += 1
            sentence_partials[partial_sentence:] = [str(message.get("text", ""))]
        # FunASR's own server also marks a 2pass sentence that ends before the input does
        # is_final: only a final after the end of input ends the stream.
        if message.get("is_final") and (end_sent or mode != "2pass-offline"):
            if end_sent:
                record.final_s = now - end_sent[0]
            record.wall_s = now - started
            if args.verify and mode == "2pass-offline":
                record.verified = partitioned(sentence_partials, record.sentences, audio)
            elif args.verify:
                record.verified = message.get("text") == expected_checksum(audio)
            return
        if mode == "2pass-offline":
            continue  # a sentence settled: not a partial
        if record.first_partial_s is None:
            record.first_partial_s = now - started
        # A chunk's latency runs from the send of the byte that completed it. Our results
        # say where their audio ends (audio_end_ms: 2pass sentences and online regions
        # restart seq); a server
        # that says nothing (FunASR's own) is taken to answer chunks in order, one partial
        # each: a chunk it skips (no text) then counts against the ones after it.
        end_ms = message.get("audio_end_ms")
        seq = message.get("seq")
        if isinstance(end_ms, int):
            end_byte = end_ms * SAMPLE_RATE // 1000 * BYTES_PER_SAMPLE
        elif isinstance(seq, int):
            # Ours, on a pass's final piece (the rest of its audio, no chunk): a 2pass
            # sentence's, or an online region's (a model whose streams are regions).
            continue
        else:
            record.chunks_in_order = True
            end_byte = (record.answered_in_order + 1) * chunk_bytes
            record.answered_in_order += 1
        sent_at = sent.time_of(end_byte)
        if sent_at is not None:
            record.chunk_latencies_s.append(now - sent_at)
            # The worker's side of the same chunk (a 2pass sentence's offline decode is
            # no chunk's: its figures would mix two pools in one distribution).
            if "queue_ms" in message:
                record.queue_ms.append(float(message["queue_ms"]))
                record.compute_ms.append(float(message["compute_ms"]))
                if "batch_size" in message:
                    record.batch_sizes.append(int(message["batch_size"]))


def partitioned(last_partials: list[str], sentences: int, audio: npt.NDArray[np.int16]) -> bool:
    """The checksum engine's 2pass check: sentence k's last partial is the checksum of the
    bytes after sentences 0..k-1, and together they are all of the audio."""
    if len(last_partials) != sentences:
        return False
    pcm = audio.astype("<i2").tobytes()
    offset = 0
    for text in last_partials:
        samples = int(text.split(":")[0])
        piece = pcm[offset : offset + 2 * samples]
        if text != checksum(piece) or len(piece) != 2 * samples:
            return False
        offset += len(piece)
    return offset == len(pcm)
