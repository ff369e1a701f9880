"""What the FSMN-VAD workers say about a 2pass utterance, read without I/O.

The ``fsmn-vad`` engine answers each audio piece with funasr's segment list for it, as
JSON, in ms from the utterance's start: ``[[beg, -1]]`` speech started at ``beg``,
``[[-1, end]]`` it ended at ``end``, ``[[beg, end]]`` both. :func:`vad_events` turns that
into events in order.

The session cuts a sentence at the end of the piece in which the VAD saw its end (the
VAD reports an end only after ``max_end_silence_time`` of silence, so the streaming pass
has heard that much more already; FunASR's 2pass server cuts at the same place). Pieces
are at most ``VAD_PIECE_BYTES``, whatever the client's framing, so a cut is never later
than that after the VAD decided.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from shared.errors import WorkerError
from shared.messages import SAMPLE_RATE

BYTES_PER_MS = SAMPLE_RATE // 1000 * 2
VAD_PIECE_BYTES = 200 * BYTES_PER_MS  # 200 ms of 16 kHz int16


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    at_byte: int  # from the utterance's start


@dataclass(frozen=True, slots=True)
class SpeechEnded:
    at_byte: int


VadEvent = SpeechStarted | SpeechEnded


def vad_events(text: str) -> list[VadEvent]:
    """The events in one VAD result's text, in the order they happened."""
    try:
        segments = json.loads(text)
        if not isinstance(segments, list):
            raise TypeError("not a list of segments")
        events: list[VadEvent] = []
        for beg, end in segments:
            if beg != -1:
                events.append(SpeechStarted(int(beg) * BYTES_PER_MS))
            if end != -1:
                events.append(SpeechEnded(int(end) * BYTES_PER_MS))
    except (ValueError, TypeError) as exc:
        raise WorkerError(f"the VAD worker answered something unreadable: {text[:80]!r}") from exc
    return events
