"""Synthetic speakers: audio that CAM++ tells apart (its build calibrates on them; the
speaker-label tests and benchmarks speak with them).

A voice is a pitch and a spectral tilt. It speaks in syllables of 180 to 220 ms (harmonics
of its pitch, rising a little, under a Hann envelope) with 50 ms between them, so its fbank
frames change over time as speech does. The mean that CAM++'s features remove is the
spectrum's constant part; the difference between voices survives it in how their voiced
frames differ from their pauses. A voice says the same syllables over and over, so that
every window of one voice sounds alike to an untrained model, as every window of one
speaker does to a trained one. Deterministic for a seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

RATE = 16000
HARMONICS = 19
# (samples, samples of pause after it, pitch as a share of the voice's): 0.75 s in all.
SYLLABLES = ((3200, 800, 1.0), (2880, 800, 1.12), (3520, 800, 0.9))


@dataclass(frozen=True, slots=True)
class Voice:
    pitch_hz: float
    tilt: float  # harmonic k's amplitude is k ** -tilt


LOW = Voice(110.0, 1.0)
HIGH = Voice(230.0, 2.0)


def speak(voice: Voice, seconds: float, seed: int) -> npt.NDArray[np.int16]:
    """``seconds`` of ``voice`` speaking, as 16 kHz int16 PCM at about -6 dBFS peak: its
    syllables over and over (``SYLLABLES``, 0.75 s in all, the diarization windows' shift),
    with a faint noise of its own for ``seed``."""
    rng = np.random.default_rng(seed)
    total = int(seconds * RATE)
    period = np.zeros(sum(length + gap for length, gap, _ in SYLLABLES), np.float64)
    position = 0
    for length, gap, pitch_ratio in SYLLABLES:
        t = np.arange(length) / RATE
        pitch = voice.pitch_hz * pitch_ratio * (1 + 0.1 * t / t[-1])  # a rise, as a syllable
        harmonics = range(1, HARMONICS + 1)
        sound = sum(np.sin(2 * np.pi * pitch * k * t) * k ** (-voice.tilt) for k in harmonics)
        period[position : position + length] = sound * np.hanning(length)
        position += length + gap
    out = np.tile(period, total // len(period) + 1)[:total]
    out = out / (float(np.abs(period).max()) or 1.0) + 0.003 * rng.standard_normal(total)
    return (np.clip(out * 0.5, -1, 1) * 32767).astype(np.int16)


def conversation(
    turns: list[tuple[Voice, float]], pause_s: float, seed: int = 0
) -> npt.NDArray[np.int16]:
    """Each ``(voice, seconds)`` turn in order, ``pause_s`` of a room's quiet (noise at
    -60 dBFS, which the VAD takes for silence) before each and after the last."""
    rng = np.random.default_rng(seed + len(turns))
    samples = int(pause_s * RATE)
    pieces: list[npt.NDArray[np.int16]] = []
    for index, (voice, seconds) in enumerate(turns):
        pieces += [_quiet(rng, samples), speak(voice, seconds, seed + index)]
    return np.concatenate([*pieces, _quiet(rng, samples)])


def _quiet(rng: np.random.Generator, samples: int) -> npt.NDArray[np.int16]:
    # Digital silence would be a log-mel of -inf that swamps every window it is in.
    return (rng.standard_normal(samples) * 0.001 * 32767).astype(np.int16)
