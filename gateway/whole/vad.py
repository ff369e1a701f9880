"""What the FSMN-VAD workers say about a 2pass utterance, read without I/O.

The ``fsmn-vad`` engine answers each audio piece with funasr's segment list for it
(``StreamResult.segments``), in ms from the utterance's start: ``(beg, -1)`` speech started
at ``beg``, ``(-1, end)`` it ended at ``end``, ``(beg, end)`` both. :func:`vad_events` turns
that into events in order.

The session cuts a sentence at the end of the piece in which the VAD saw its end (the
VAD reports an end only after ``max_end_silence_time`` of silence, so the streaming pass
has heard that much more already; FunASR's 2pass server cuts at the same place). Pieces
are at most ``VAD_PIECE_BYTES``, whatever the client's framing, so a cut is never later
than that after the VAD decided.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.messages import OPEN_END_MS, SAMPLE_RATE

BYTES_PER_MS = SAMPLE_RATE // 1000 * 2
VAD_PIECE_BYTES = 200 * BYTES_PER_MS  # 200 ms of 16 kHz int16


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    at_byte: int  # from the utterance's start


@dataclass(frozen=True, slots=True)
class SpeechEnded:
    at_byte: int


VadEvent = SpeechStarted | SpeechEnded


def vad_events(segments: Sequence[tuple[int, int]]) -> list[VadEvent]:
    """The events in one VAD result's segments, in the order they happened."""
    events: list[VadEvent] = []
    for beg, end in segments:
        if beg != OPEN_END_MS:
            events.append(SpeechStarted(beg * BYTES_PER_MS))
        if end != OPEN_END_MS:
            events.append(SpeechEnded(end * BYTES_PER_MS))
    return events
