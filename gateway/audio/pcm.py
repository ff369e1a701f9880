"""What the gateway's PCM is, defined once: 16 kHz (the models'), mono, signed 16-bit
little-endian; and the rates a client may send, which are resampled to it."""

from __future__ import annotations

from shared.messages import SAMPLE_RATE

__all__ = [
    "BYTES_PER_SAMPLE",
    "BYTES_PER_SECOND",
    "MAX_AUDIO_FS",
    "MIN_AUDIO_FS",
    "SAMPLE_RATE",
    "bytes_per_second",
]

BYTES_PER_SAMPLE = 2
BYTES_PER_SECOND = SAMPLE_RATE * BYTES_PER_SAMPLE  # of the gateway's 16 kHz PCM
# Client rates taken (and resampled): telephony's 8 kHz to studio's 48 kHz.
MIN_AUDIO_FS = 8000
MAX_AUDIO_FS = 48000


def bytes_per_second(rate: int) -> int:
    """Bytes a second of mono 16-bit PCM at ``rate``."""
    return rate * BYTES_PER_SAMPLE
