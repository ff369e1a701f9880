"""WAV files for upload tests: random speech-like samples, written by libsndfile."""

from __future__ import annotations

import io

import numpy as np
import soundfile


def wav_bytes(
    samples: np.ndarray, rate: int = 16000, fmt: str = "WAV", subtype: str = "PCM_16"
) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def speech(seconds: float, rate: int = 16000, channels: int = 1) -> np.ndarray:
    rng = np.random.default_rng(0)
    shape = (int(seconds * rate), channels) if channels > 1 else (int(seconds * rate),)
    return rng.integers(-8000, 8000, size=shape, dtype=np.int16)
