"""Streamed PCM at the client's ``audio_fs``, resampled to the models' 16 kHz.

FunASR's Python client and its HTML5 page send a WAV file's own sample rate as
``audio_fs`` and its samples as they are; FunASR's C++ server resamples them (its Python
server decodes them as if they were 16 kHz). We resample, with soxr's streaming resampler:
a whole number of samples in, whatever is ready out, the filter's tail at the end.

The stream runs in float32 and rounds to int16 itself, as ``POST /v1/transcribe`` does
(``gateway.files.request.decode_wav``): soxr's int16 stream rounds each block with its own
dither, so its output moved by a step or two with the client's framing; in float32 the
output is the same however the audio is cut, and equal to one resampling of the whole (so
a test can compute exactly the bytes that reach the pool).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gateway.audio.pcm import MAX_AUDIO_FS, MIN_AUDIO_FS
from shared.messages import SAMPLE_RATE


class PcmResampler:
    """One utterance's s16le PCM at ``rate`` in, s16le at 16 kHz out (sans I/O)."""

    def __init__(self, rate: int) -> None:
        import soxr

        if not MIN_AUDIO_FS <= rate <= MAX_AUDIO_FS:
            raise ValueError(f"rate must be in {MIN_AUDIO_FS}..{MAX_AUDIO_FS} Hz")
        self.rate = rate
        self._stream = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")

    def push(self, pcm: bytes) -> bytes:
        """Resample whole samples; the output may lag the input by the filter's delay."""
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32)
        samples /= 32768.0  # as soundfile reads 16-bit PCM as float
        return self._resample(samples, last=False)

    def flush(self) -> bytes:
        """The rest, at the end of the utterance."""
        return self._resample(np.zeros(0, dtype=np.float32), last=True)

    def _resample(self, samples: npt.NDArray[np.float32], last: bool) -> bytes:
        return to_pcm16(self._stream.resample_chunk(samples, last=last))


def to_pcm16(samples: npt.NDArray[np.float32]) -> bytes:
    """float32 samples in [-1, 1) as s16le, rounded to nearest (``decode_wav``'s rounding)."""
    scaled = samples * np.float32(32768.0)
    np.clip(scaled, -32768, 32767, out=scaled)
    np.rint(scaled, out=scaled)
    return scaled.astype("<i2").tobytes()


def resampled_bytes(raw_bytes: int, rate: int) -> int:
    """About how many 16 kHz bytes ``raw_bytes`` at ``rate`` become (for the limits)."""
    return raw_bytes * SAMPLE_RATE // rate
