"""G.711 (u-law and A-law) and PCM16 as the OpenAI dialect receives them, decoded to s16le
PCM at the session's rate (sans I/O). The tables are ITU-T G.711's, checked against
libsndfile's decoders (``tests/gateway/openai_api/test_realtime_units.py``)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

Encoding = Literal["pcm16", "pcmu", "pcma"]


def _ulaw_table() -> npt.NDArray[np.int16]:
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    exponent = (codes >> 4) & 0x07
    magnitude = ((((codes & 0x0F) << 3) + 0x84) << exponent) - 0x84
    return np.where(codes & 0x80, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> npt.NDArray[np.int16]:
    codes = np.arange(256, dtype=np.int32) ^ 0x55
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = np.where(
        exponent == 0,
        (mantissa << 4) + 8,
        ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0),
    )
    return np.where(codes & 0x80, magnitude, -magnitude).astype(np.int16)


G711_TABLES: dict[Encoding, npt.NDArray[np.int16]] = {
    "pcmu": _ulaw_table(),
    "pcma": _alaw_table(),
}


class PcmDecoder:
    """The session's format in, s16le at its rate out; a PCM16 sample split across two
    appends is joined."""

    def __init__(self, encoding: Encoding) -> None:
        self.encoding = encoding
        self._odd_byte = b""

    def decode(self, audio: bytes) -> bytes:
        if self.encoding != "pcm16":
            table = G711_TABLES[self.encoding]
            return table[np.frombuffer(audio, dtype=np.uint8)].astype("<i2").tobytes()
        pcm = self._odd_byte + audio if self._odd_byte else audio
        cut = len(pcm) // 2 * 2
        self._odd_byte = pcm[cut:]
        return pcm[:cut]

    @property
    def holds_audio(self) -> bool:
        return bool(self._odd_byte)
