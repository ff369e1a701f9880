"""Which speaker said each sentence, from the speaker turns (sans I/O): funasr's
``distribute_spk``, and the turns as the answers write them."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from shared.messages import SpeakerTurn


def sentence_speakers(spans: Sequence[tuple[int, int]], turns: Sequence[SpeakerTurn]) -> list[int]:
    """Each ``(start, end)`` span's speaker (ms), as funasr's ``distribute_spk`` gives it:
    the speaker of the turn it overlaps most, where a later turn of the speaker already
    chosen adds its overlap to the lead; 0 for a span no turn overlaps. ``turns`` are in
    order and do not overlap (``postprocess`` makes them so), so only the turns that
    overlap a span can change its speaker, and only those are looked at."""
    ends = [turn.end for turn in turns]
    speakers = []
    for start, end in spans:
        speaker, lead = 0, 0
        for turn in turns[bisect.bisect_right(ends, start) :]:
            if turn.start >= end:
                break
            overlap = max(min(end, turn.end) - max(start, turn.start), 0)
            if overlap > lead:
                lead, speaker = overlap, turn.speaker
            if overlap > 0 and speaker == turn.speaker:
                lead += overlap
        speakers.append(speaker)
    return speakers


def turns_json(turns: Sequence[SpeakerTurn]) -> list[dict[str, int]]:
    """The turns as the answers give them: ``{"start", "end", "spk"}`` in ms."""
    return [{"start": t.start, "end": t.end, "spk": t.speaker} for t in turns]
