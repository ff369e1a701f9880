"""One session of ``bench.load.realtime_dialect``, on any endpoint: what it sends, made
ahead of time (``plans``), what it makes of each server frame (``take_result``, no I/O), and
the session itself, paced in real time (``run_session``).

FunASR's: a config, binary PCM frames, the end. OpenAI's: ``session.update``, one
``input_audio_buffer.append`` per frame, ``input_audio_buffer.commit``. Deepgram's: the
query (linear16, interim results, no endpointing), binary PCM frames, ``CloseStream``.
All in 100 ms frames; a model chunk (600 ms) ends with every sixth.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import soxr
import websockets

from bench.common.audio import expected_checksum

Endpoint = Literal["funasr", "openai", "deepgram"]
ENDPOINTS: tuple[Endpoint, ...] = ("funasr", "openai", "deepgram")
SAMPLE_RATE = 16000
FRAME_S = 0.1
FRAMES_PER_CHUNK = 6  # a model chunk (600 ms) ends with every sixth frame
CHUNK_SAMPLES = 9600
REALTIME_PATH = "v1/realtime?intent=transcription"
# No pause ends an utterance: the session is one utterance, as the other two endpoints'.
LISTEN_PATH = "v1/listen?encoding=linear16&sample_rate=16000&interim_results=true&endpointing=false"
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"


@dataclass(frozen=True, slots=True)
class Plan:
    """What one session sends, made before the clock starts."""

    endpoint: Endpoint
    url: str
    opening: str | None  # Deepgram's has none: its query says it all
    frames: tuple[bytes, ...]
    closing: str
    audio_seconds: float
    whole_chunks: int  # results before the final one
    expected: str  # the checksum of the 16 kHz audio the pool gets


@dataclass(slots=True)
class SessionRecord:
    chunk_latencies_s: list[float] = field(default_factory=list)
    results: int = 0  # chunk results and deltas, the final's included
    last_text: str | None = None
    final_s: float | None = None
    error: str | None = None
    verified: bool = False


# -- what is sent -------------------------------------------------------------------------


def at_rate(audio: npt.NDArray[np.int16], rate: int) -> tuple[npt.NDArray[np.int16], str]:
    """The client's audio at ``rate`` and the checksum of what the pool gets from it: the
    gateway's resampling (soxr HQ in float32, rounded) equals one resampling of the whole."""
    if rate == SAMPLE_RATE:
        return audio, expected_checksum(audio)
    sent = _rounded(soxr.resample(audio / np.float32(32768.0), SAMPLE_RATE, rate, quality="HQ"))
    pooled = _rounded(soxr.resample(sent / np.float32(32768.0), rate, SAMPLE_RATE, quality="HQ"))
    return sent, expected_checksum(pooled)


def _rounded(samples: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.int16]:
    scaled = np.rint(np.clip(samples.astype(np.float32) * np.float32(32768.0), -32768, 32767))
    pcm: npt.NDArray[np.int16] = scaled.astype(np.int16)
    return pcm


def plans(endpoint: Endpoint, base_url: str, audios: Sequence[Any], rate: int) -> list[Plan]:
    """One plan per audio; at the OpenAI endpoint the audio is at ``rate``."""
    made = []
    for audio in audios:
        sent, expected = at_rate(audio, rate if endpoint == "openai" else SAMPLE_RATE)
        step = int(FRAME_S * (rate if endpoint == "openai" else SAMPLE_RATE))
        pcm = [sent[at : at + step].astype("<i2").tobytes() for at in range(0, len(sent), step)]
        whole_chunks = int(expected.split(":")[0]) // CHUNK_SAMPLES
        if endpoint == "funasr":
            config = {
                **{"mode": "online", "chunk_size": [5, 10, 5], "chunk_interval": 10},
                **{"audio_fs": SAMPLE_RATE, "wav_name": "bench", "is_speaking": True},
                "timing": True,
            }
            plan = Plan(
                endpoint,
                base_url,
                json.dumps(config),
                tuple(pcm),
                json.dumps({"is_speaking": False}),
                len(audio) / SAMPLE_RATE,
                whole_chunks,
                expected,
            )
        elif endpoint == "deepgram":
            plan = Plan(
                endpoint,
                base_url + LISTEN_PATH,
                None,
                tuple(pcm),
                json.dumps({"type": "CloseStream"}),
                len(audio) / SAMPLE_RATE,
                whole_chunks,
                expected,
            )
        else:
            audio_format = {"type": "audio/pcm", "rate": rate}
            update = {
                "type": "session.update",
                "session": {
                    "type": "transcription",
                    "audio": {"input": {"format": audio_format, "turn_detection": None}},
                },
            }
            appends = tuple(
                json.dumps(
                    {"type": "input_audio_buffer.append", "audio": base64.b64encode(p).decode()}
                ).encode()
                for p in pcm
            )
            plan = Plan(
                endpoint,
                base_url + REALTIME_PATH,
                json.dumps(update),
                appends,
                json.dumps({"type": "input_audio_buffer.commit"}),
                len(audio) / SAMPLE_RATE,
                whole_chunks,
                expected,
            )
        made.append(plan)
    return made


# -- what comes back (no I/O) ------------------------------------------------------------


def take_result(
    plan: Plan, record: SessionRecord, message: dict[str, Any], now: float, sent: list[float]
) -> bool:
    """One server frame of the session: True once its final result is in (or an error).
    ``sent``: when each frame went out, then the end or commit."""
    kind = message.get("type")
    if kind in ("error", "Error"):
        detail = message.get("message") or message.get("description")
        record.error = f"{message.get('code') or message.get('error') or kind}: {detail}"
        return True
    if plan.endpoint == "deepgram":
        if kind != "Results":
            return False  # Metadata, after the final
        text = message["channel"]["alternatives"][0]["transcript"]
        if message.get("is_final"):
            return _final(plan, record, text, now, sent)
        chunk = record.results
        record.last_text = text
    elif plan.endpoint == "funasr":
        if message.get("is_final"):
            return _final(plan, record, message.get("text"), now, sent)
        seq = message.get("seq")
        if not isinstance(seq, int):
            return False
        chunk = seq
    elif kind == DELTA:
        chunk = record.results
        record.last_text = message.get("delta")
    elif kind == COMPLETED:
        return _final(plan, record, record.last_text, now, sent)
    else:
        return False  # session.created, .updated, committed, item.added
    record.results += 1
    last_frame = (chunk + 1) * FRAMES_PER_CHUNK - 1
    if chunk < plan.whole_chunks and last_frame < min(len(plan.frames), len(sent)):
        record.chunk_latencies_s.append(now - sent[last_frame])
    return False


def _final(plan: Plan, record: SessionRecord, text: object, now: float, sent: list[float]) -> bool:
    if plan.endpoint != "openai":  # its final is a result of its own, not the last delta
        record.results += 1
    if len(sent) > len(plan.frames):  # the end or commit was sent
        record.final_s = now - sent[-1]
    record.verified = text == plan.expected and record.results == plan.whole_chunks + 1
    return True


# -- the session ----------------------------------------------------------------------


async def run_session(
    plan: Plan, record: SessionRecord, timeout: float, headers: dict[str, str] | None
) -> None:
    try:
        async with websockets.connect(
            plan.url, compression=None, max_size=None, open_timeout=timeout,
            additional_headers=headers,
        ) as ws:  # fmt: skip
            if plan.opening is not None:
                await ws.send(plan.opening)
            started = time.perf_counter()
            sent: list[float] = []
            text = plan.endpoint == "openai"

            async def send() -> None:
                for index, frame in enumerate(plan.frames):
                    due = started + index * FRAME_S
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    await ws.send(frame, text=text)
                    sent.append(time.perf_counter())
                await ws.send(plan.closing)
                sent.append(time.perf_counter())

            async with asyncio.TaskGroup() as group:
                sender = group.create_task(send())
                try:
                    while True:
                        message = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                        if take_result(plan, record, message, time.perf_counter(), sent):
                            break
                finally:
                    sender.cancel()  # done already, unless the session ended early
    except websockets.ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd else None
        record.error = f"closed {code}: {exc.rcvd.reason if exc.rcvd else ''}"
    except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
