"""Streamed PCM at the client's ``audio_fs``, resampled to the models' 16 kHz.

FunASR's Python client and its HTML5 page send a WAV file's own sample rate as
``audio_fs`` and its samples as they are; FunASR's C++ server resamples them (its Python
server decodes them as if they were 16 kHz). We resample, with soxr's streaming resampler:
a whole number of samples in, whatever is ready out, the filter's tail at the end.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shared.messages import SAMPLE_RATE

MIN_AUDIO_FS = 8000
MAX_AUDIO_FS = 48000


class PcmResampler:
    """One utterance's s16le PCM at ``rate`` in, s16le at 16 kHz out (sans I/O)."""

    def __init__(self, rate: int) -> None:
        import soxr

        if not MIN_AUDIO_FS <= rate <= MAX_AUDIO_FS:
            raise ValueError(f"rate must be in {MIN_AUDIO_FS}..{MAX_AUDIO_FS} Hz")
        self.rate = rate
        self._stream = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="int16", quality="HQ")

    def push(self, pcm: bytes) -> bytes:
        """Resample whole samples; the output may lag the input by the filter's delay."""
        return self._resample(np.frombuffer(pcm, dtype="<i2"), last=False)

    def flush(self) -> bytes:
        """The rest, at the end of the utterance."""
        return self._resample(np.zeros(0, dtype=np.int16), last=True)

    def _resample(self, samples: npt.NDArray[np.int16], last: bool) -> bytes:
        out: npt.NDArray[np.int16] = self._stream.resample_chunk(samples, last=last)
        return out.astype("<i2", copy=False).tobytes()


def resampled_bytes(raw_bytes: int, rate: int) -> int:
    """About how many 16 kHz bytes ``raw_bytes`` at ``rate`` become (for the limits)."""
    return raw_bytes * SAMPLE_RATE // rate
