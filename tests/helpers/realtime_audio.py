"""What the realtime tests share: audio, WAV files, the audio the pool must receive for
them (computed independently of the gateway), and reading a connection's events."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import numpy.typing as npt
import soundfile
import soxr
from openai.resources.beta.realtime.realtime import RealtimeConnection as BetaConnection
from openai.resources.realtime.realtime import RealtimeConnection as GaConnection

RealtimeConnection = GaConnection | BetaConnection  # the SDK's two clients


def noise(rng: np.random.Generator, seconds: float, rate: int) -> npt.NDArray[np.int16]:
    return (rng.standard_normal(int(seconds * rate)) * 4000).astype(np.int16)


def silence(seconds: float, rate: int) -> npt.NDArray[np.int16]:
    return np.zeros(int(seconds * rate), dtype=np.int16)


def wav_file(samples: npt.NDArray[np.int16], rate: int, subtype: str = "PCM_16") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, rate, subtype=subtype, format="WAV")
    return out.getvalue()


def pool_audio(wav: bytes) -> bytes:
    """What the pool must receive for ``wav``: its samples as soundfile reads them, one
    soxr resampling to 16 kHz in float32, rounded to int16."""
    samples, rate = soundfile.read(io.BytesIO(wav), dtype="float32")
    if rate != 16000:
        samples = soxr.resample(samples, rate, 16000, quality="HQ")
    scaled = np.rint(np.clip(samples * 32768.0, -32768, 32767))
    return bytes(scaled.astype("<i2").tobytes())


def wav_payload(wav: bytes) -> bytes:
    """The WAV file's data chunk: what a client streams."""
    at = 12
    while at < len(wav):
        size = int.from_bytes(wav[at + 4 : at + 8], "little")
        if wav[at : at + 4] == b"data":
            return wav[at + 8 : at + 8 + size]
        at += 8 + size + size % 2
    raise AssertionError("no data chunk")


def append_all(conn: RealtimeConnection, payload: bytes, piece: int) -> None:
    for at in range(0, len(payload), piece):
        conn.input_audio_buffer.append(audio=base64.b64encode(payload[at : at + piece]).decode())


def events_until(conn: RealtimeConnection, last: str, count: int = 1) -> list[Any]:
    """Events up to the ``count``-th of type ``last``."""
    events: list[Any] = []
    seen = 0
    while seen < count:
        event = conn.recv()
        events.append(event)
        assert event.type != "error", event
        seen += event.type == last
    return events


def types(events: list[Any]) -> list[str]:
    return [event.type for event in events]


COMPLETED = "conversation.item.input_audio_transcription.completed"
DELTA = "conversation.item.input_audio_transcription.delta"
