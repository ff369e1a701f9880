"""One stream of ``bench.load.ws_load --protocol sherpa``: sherpa-onnx's online WebSocket
protocol (``bench.load.sherpa_protocol``) paced as FunASR's streams are, its results made
into the same ``StreamRecord``.

The measure is ``ws_stream``'s, with one difference in what a result is timed from:

- frames: the same audio in frames of the same length (``chunk_size[1] * 60 /
  chunk_interval`` ms: 60 ms by default), as float32, paced in real time or ``--fast``;
- per-chunk latency: a decode step's result, from the send of the frame that completed
  the audio the server waited for before taking that step up (``samples_needed``: its 61
  fbank frames and one more; 635 ms for the first step, then every 600 ms). Ours time a
  600 ms chunk from its last byte. Every step's result counts, its text changed or not,
  as every chunk's result counts with ours. Steps that ran on the tail padding after
  ``Done`` are no chunk's: they make the final latency;
- first partial: the first result; final: ``Done`` sent -> the ``is_eof`` result (or
  ``Done!``, where the last result raced the end and lacks the flag);
- no queue or compute times (sherpa sends none) and no refusals (it has no limit to say).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import websockets

from bench.load.sherpa_protocol import (
    END_OF_AUDIO,
    EndAck,
    ProtocolError,
    audio_frame,
    parse,
    samples_needed,
)
from bench.load.ws_stream import SAMPLE_RATE, SendLog, StreamRecord


async def run_sherpa_stream(
    index: int,
    args: argparse.Namespace,
    audio: npt.NDArray[np.int16],
    record: StreamRecord,
) -> None:
    chunk_samples = int(args.chunk_size.split(",")[1]) * 960
    frame_samples = chunk_samples // args.chunk_interval
    record.audio_seconds = len(audio) / SAMPLE_RATE
    record.chunks_in_order = True
    sent = SendLog()  # in samples, not bytes: what samples_needed counts
    try:
        async with websockets.connect(args.url, max_size=None, open_timeout=args.timeout) as ws:
            started = time.perf_counter()
            end_sent: list[float] = []

            async def send() -> None:
                for offset in range(0, len(audio), frame_samples):
                    frame = audio[offset : offset + frame_samples]
                    if not args.fast:
                        due = started + offset / SAMPLE_RATE
                        await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    await ws.send(audio_frame(frame))
                    sent.record(offset + len(frame), time.perf_counter())
                await ws.send(END_OF_AUDIO)
                end_sent.append(time.perf_counter())

            async with asyncio.TaskGroup() as group:
                sender = group.create_task(send())
                try:
                    await receive(ws, record, started, sent, end_sent, args.timeout)
                finally:
                    sender.cancel()  # done already, unless the session ended early
    except websockets.InvalidStatus as exc:
        record.error = f"HTTP {exc.response.status_code}"
    except websockets.ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd else None
        record.error = f"closed {code}: {exc.rcvd.reason if exc.rcvd else ''}"
    except (OSError, TimeoutError, ProtocolError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"


async def receive(
    ws: Any,
    record: StreamRecord,
    started: float,
    sent: SendLog,
    end_sent: list[float],
    timeout: float,
) -> None:
    while True:
        event = parse(await asyncio.wait_for(ws.recv(), timeout))
        now = time.perf_counter()
        if isinstance(event, EndAck) or event.is_eof:
            if not end_sent:
                record.error = "the stream ended before its audio did"
                return
            record.final_s = now - end_sent[0]
            record.wall_s = now - started
            return
        if record.first_partial_s is None:
            record.first_partial_s = now - started
        needed = samples_needed(record.answered_in_order)
        record.answered_in_order += 1
        sent_at = sent.time_of(needed)  # None: a step on the tail padding after Done
        if sent_at is not None:
            record.chunk_latencies_s.append(now - sent_at)
