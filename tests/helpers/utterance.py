"""What the session and utterance tests share: settings, audio, and reading actions back."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gateway.audio.endpointer import EndpointSettings
from gateway.session.utterance import UtteranceSettings
from gateway.session.utterance.actions import (
    Action,
    FinishStream,
    OpenStream,
    Pool,
    SendAudio,
    StreamRef,
)

BYTES_PER_MS = 32
SETTINGS = UtteranceSettings(
    max_segment_bytes=60_000 * BYTES_PER_MS,
    endpoint=EndpointSettings(silence_ms=300, min_speech_ms=150, preroll_ms=300),
    whole_text_is_delta=True,
)


def loud(ms: int) -> bytes:
    rng = np.random.default_rng(ms)
    return rng.integers(-10000, 10000, ms * 16, dtype=np.int16).astype("<i2").tobytes()


def quiet(ms: int) -> bytes:
    return bytes(ms * BYTES_PER_MS)


def opened(actions: Sequence[Action], pool: Pool) -> list[StreamRef]:
    return [a.stream for a in actions if isinstance(a, OpenStream) and a.stream.pool is pool]


def audio_of(actions: Sequence[Action], stream: StreamRef) -> bytes:
    """Every byte the actions send to ``stream``, finish included."""
    return b"".join(
        bytes(a.pcm)
        for a in actions
        if isinstance(a, SendAudio | FinishStream) and a.stream is stream
    )


def names(actions: Sequence[Action]) -> list[str]:
    return [type(action).__name__ for action in actions]
