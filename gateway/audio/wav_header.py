"""A streamed WAV's header, read from its first bytes (sans I/O): the rate, and where the PCM
starts. Only what a live stream can be is taken: 16-bit PCM, one channel, the header
whole in the first message (it is 44 bytes, or a few more with extra chunks)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gateway.audio.pcm import MAX_AUDIO_FS, MIN_AUDIO_FS

PCM_FORMAT = 1
EXTENSIBLE_FORMAT = 0xFFFE  # WAVE_FORMAT_EXTENSIBLE, whose subformat we take as PCM


class WavHeaderError(ValueError):
    """Not a WAV header we can stream from."""


@dataclass(frozen=True, slots=True)
class WavHeader:
    rate: int
    data_offset: int  # where the samples start in the bytes given


def read_wav_header(first: bytes) -> WavHeader:
    """The header at the start of ``first``; raises :class:`WavHeaderError` when it is not
    RIFF/WAVE 16-bit mono PCM, or does not reach its ``data`` chunk."""
    if len(first) < 12 or first[:4] != b"RIFF" or first[8:12] != b"WAVE":
        raise WavHeaderError("not RIFF/WAVE")
    at = 12
    rate: int | None = None
    while at + 8 <= len(first):
        chunk, size = first[at : at + 4], struct.unpack_from("<I", first, at + 4)[0]
        body = at + 8
        if chunk == b"fmt ":
            if size < 16 or body + 16 > len(first):
                raise WavHeaderError("a fmt chunk too short")
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", first, body)
            if tag not in (PCM_FORMAT, EXTENSIBLE_FORMAT) or bits != 16 or channels != 1:
                raise WavHeaderError(
                    f"format {tag}, {channels} channel(s), {bits} bits: mono 16-bit PCM is served"
                )
            if not MIN_AUDIO_FS <= rate <= MAX_AUDIO_FS:
                raise WavHeaderError(f"{rate} Hz: {MIN_AUDIO_FS} to {MAX_AUDIO_FS} Hz are served")
        elif chunk == b"data":
            if rate is None:
                raise WavHeaderError("the data chunk comes before the fmt chunk")
            return WavHeader(rate, body)
        at = body + size + (size & 1)  # chunks are padded to even sizes
    raise WavHeaderError("the header does not reach its data chunk in the first message")
