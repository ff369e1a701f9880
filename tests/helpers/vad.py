"""Audio for the VAD tests and funasr's own streaming FSMN-VAD, called as FunASR's 2pass
server calls it: the reference the VAD engines and the gateway's sentences are held to."""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.engines.paraformer.streaming import to_float

SENTENCE_ENDS = "\u3002\uff1f"  # full-width full stop and question mark


def spoken(seed: int, *parts: tuple[str, float]) -> np.ndarray:
    """Tone-and-noise "speech" and near-silence, in the given order and lengths."""
    rng = np.random.default_rng(seed)
    pieces = []
    for kind, seconds in parts:
        n = int(seconds * 16000)
        if kind == "speech":
            t = np.arange(n) / 16000
            pieces.append(9000 * np.sin(2 * np.pi * 220 * t) + 1500 * rng.standard_normal(n))
        else:
            pieces.append(30 * rng.standard_normal(n))
    return np.concatenate(pieces).astype(np.int16)


def funasr_vad(model: Any, piece: np.ndarray, cache: dict[str, Any]) -> list[list[int]]:
    """funasr's own streaming VAD on one piece, called as FunASR's 2pass server calls it
    (with the model's 800 ms end silence, as our engine passes it)."""
    result = model.generate(
        input=to_float(piece),
        cache=cache,
        is_final=False,
        chunk_size=60,
        max_end_silence_time=800,
        disable_pbar=True,
    )
    return list(result[0]["value"])


def funasr_final(model: Any, piece: np.ndarray, cache: dict[str, Any]) -> list[list[int]]:
    """``funasr_vad``'s call for a stream's last piece, which flushes the stream."""
    result = model.generate(
        input=to_float(piece),
        cache=cache,
        is_final=True,
        chunk_size=60,
        max_end_silence_time=800,
        disable_pbar=True,
    )
    return list(result[0]["value"])
