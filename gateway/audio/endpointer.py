"""Sentence ends in a 2pass utterance, from the audio's energy (sans I/O).

FunASR finds sentence ends with its FSMN-VAD model; without one, this endpointer does:
16 kHz int16 PCM is cut into 30 ms frames; a frame is speech when its RMS level is above
``energy_dbfs``; a sentence ends once ``min_speech_ms`` of speech has been heard and then
``silence_ms`` of frames in a row are not speech (800 ms, FunASR's VAD default for
``max_end_silence_time``). The end is placed at the end of that silence. A sentence with
no such pause ends at ``max_sentence_bytes`` (``ASR_MAX_SEGMENT_SECONDS``), as FunASR's
VAD ends one at ``max_single_segment_time``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FRAME_SAMPLES = 480  # 30 ms at 16 kHz
FRAME_BYTES = 2 * FRAME_SAMPLES


@dataclass(frozen=True, slots=True)
class EndpointSettings:
    silence_ms: int = 800
    min_speech_ms: int = 300
    energy_dbfs: float = -40.0
    # The offline pass of a sentence starts this long before its detected speech start
    # (energy endpointer: the first speech frame; FSMN-VAD: its start point, which looks
    # back 200 ms itself); the silence before that is decoded by the streaming pass only.
    preroll_ms: int = 300

    @property
    def threshold(self) -> float:
        """The RMS, in int16 units, above which a frame is speech."""
        return 32768.0 * math.pow(10.0, self.energy_dbfs / 20.0)


@dataclass(frozen=True, slots=True)
class SentenceEnd:
    """Where a sentence ended (``offset``) and where its speech began (``speech_start``,
    None if no frame was loud enough), in bytes from the sentence's start."""

    offset: int
    speech_start: int | None


class EnergyEndpointer:
    """Feed PCM as it arrives; ``push`` returns the sentences that ended in it, each
    counted from the end of the one before."""

    def __init__(self, settings: EndpointSettings, max_sentence_bytes: int | None = None) -> None:
        self._settings = settings
        self._max_bytes = max_sentence_bytes
        self._pending = bytearray()  # less than a frame, waiting for the rest
        self._consumed = 0  # bytes of the sentence already framed
        self._speech_ms = 0
        self._silence_ms = 0
        self._speech_start: int | None = None

    def push(self, pcm: bytes) -> list[SentenceEnd]:
        self._pending += pcm
        ends: list[SentenceEnd] = []
        whole = len(self._pending) // FRAME_BYTES * FRAME_BYTES
        if not whole:
            return ends
        frames = np.frombuffer(bytes(self._pending[:whole]), dtype="<i2").reshape(-1, FRAME_SAMPLES)
        del self._pending[:whole]
        levels = np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1))
        for level in levels:
            self._consumed += FRAME_BYTES
            if level > self._settings.threshold:
                if self._speech_start is None:
                    self._speech_start = self._consumed - FRAME_BYTES
                self._speech_ms += 30
                self._silence_ms = 0
                paused = False
            else:
                self._silence_ms += 30
                paused = (
                    self._speech_ms >= self._settings.min_speech_ms
                    and self._silence_ms >= self._settings.silence_ms
                )
            full = self._max_bytes is not None and self._consumed + FRAME_BYTES > self._max_bytes
            if paused or full:
                ends.append(SentenceEnd(self._consumed, self._speech_start))
                self._consumed = 0  # offsets of later ends count from this one
                self._speech_ms = 0
                self._silence_ms = 0
                self._speech_start = None
        return ends

    @property
    def speech_start(self) -> int | None:
        """Where the current (unfinished) sentence's first speech frame starts."""
        return self._speech_start
