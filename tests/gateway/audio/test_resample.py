"""Streamed resampling of a client's ``audio_fs`` to 16 kHz."""

from __future__ import annotations

import random

import numpy as np
import pytest
import soxr

from gateway.audio.resample import PcmResampler, resampled_bytes


def pcm(samples: np.ndarray) -> bytes:
    return samples.astype("<i2").tobytes()


def stream(resampler: PcmResampler, data: bytes, rng: random.Random) -> bytes:
    """``data`` pushed in random whole-sample pieces, then flushed."""
    out, offset = bytearray(), 0
    while offset < len(data):
        size = 2 * rng.randint(1, 2000)
        out += resampler.push(data[offset : offset + size])
        offset += size
    return bytes(out + resampler.flush())


@pytest.mark.parametrize("rate", [8000, 11025, 22050, 44100, 48000])
def test_streamed_pieces_give_exactly_what_one_resampling_gives(rate: int) -> None:
    """However the audio is cut: what POST /v1/transcribe computes from a WAV of it."""
    samples = np.random.default_rng(rate).normal(0, 3000, size=rate * 2).astype(np.int16)
    whole = soxr.resample(samples.astype(np.float32) / 32768, rate, 16000, quality="HQ")
    expected = np.rint(np.clip(whole * 32768, -32768, 32767)).astype(np.int16)
    out = np.frombuffer(stream(PcmResampler(rate), pcm(samples), random.Random(rate)), "<i2")
    assert len(out) == len(expected) == 32000
    assert np.array_equal(out, expected)


def test_a_tone_keeps_its_frequency() -> None:
    rate, tone = 8000, 1000.0
    t = np.arange(rate) / rate
    samples = (8000 * np.sin(2 * np.pi * tone * t)).astype(np.int16)
    out = np.frombuffer(stream(PcmResampler(rate), pcm(samples), random.Random(1)), "<i2")
    spectrum = np.abs(np.fft.rfft(out.astype(float)))
    assert np.argmax(spectrum) * 16000 / len(out) == pytest.approx(tone, abs=2)


@pytest.mark.parametrize("rate", [7999, 48001, 0])
def test_rates_out_of_range_are_refused(rate: int) -> None:
    with pytest.raises(ValueError, match=r"8000\.\.48000"):
        PcmResampler(rate)


def test_resampled_bytes_scale_to_16khz() -> None:
    assert resampled_bytes(16000, 8000) == 32000
    assert resampled_bytes(96000, 48000) == 32000
