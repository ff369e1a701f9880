"""Two hotword sets, tone-and-noise clips and funasr's own text with hotwords: what the
SeACo-Paraformer tests of the workers and of the gateway hold their results to."""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.engines.paraformer.offline import hotword_argument
from workers.engines.paraformer.streaming import to_float

FIRST = ("一丁", "七万")
SECOND = ("丈三", "上下")


def clip(seed: int, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 3000 * np.sin(2 * np.pi * (200 + 60 * seed) * t)
    return (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)


def generate(model: Any, audio: np.ndarray, words: tuple[str, ...] = ()) -> str:
    """funasr's own text for one utterance: the reference every engine result must equal."""
    hotword = {"hotword": hotword_argument(words)} if words else {}
    return str(model.generate(input=to_float(audio), disable_pbar=True, **hotword)[0]["text"])
