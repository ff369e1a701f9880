"""Each sentence's speaker, as funasr's ``distribute_spk`` gives it, from the turns."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.funasr.speaker_labels import sentence_speakers, turns_json
from shared.messages import SpeakerTurn


@st.composite
def turns_and_spans(draw: st.DrawFn) -> tuple[list[SpeakerTurn], list[tuple[int, int]]]:
    """Turns in order, touching or apart, as ``postprocess`` leaves them; spans anywhere."""
    turns, at = [], 0
    for _ in range(draw(st.integers(0, 12))):
        at += draw(st.sampled_from([0, 0, 10, 500]))
        length = draw(st.integers(10, 3000))
        turns.append(SpeakerTurn(at, at + length, draw(st.integers(0, 3))))
        at += length
    spans = []
    for _ in range(draw(st.integers(0, 10))):
        start = draw(st.integers(0, at + 1000))
        spans.append((start, start + draw(st.integers(0, 4000))))
    return turns, spans


@settings(max_examples=400, deadline=None)
@given(turns_and_spans())
def test_every_span_gets_the_speaker_distribute_spk_gives_it(
    case: tuple[list[SpeakerTurn], list[tuple[int, int]]],
) -> None:
    from workers.engines.runtime.funasr_quiet import quiet_funasr

    with quiet_funasr():
        from funasr.models.campplus.utils import distribute_spk

    turns, spans = case
    sentences = [{"start": start, "end": end} for start, end in spans]
    funasr_turns = [(t.start / 1000, t.end / 1000, t.speaker) for t in turns]
    expected = [s["spk"] for s in distribute_spk(copy.deepcopy(sentences), funasr_turns)]
    assert sentence_speakers(spans, turns) == expected


def test_the_turn_that_takes_the_lead_counts_twice_as_funasrs_does() -> None:
    # 0 overlaps 300 ms and takes the lead, which its own overlap then adds to (600), so
    # 1's 400 do not take it; a span no turn overlaps is speaker 0's.
    turns = [SpeakerTurn(0, 300, 0), SpeakerTurn(300, 700, 1), SpeakerTurn(700, 800, 1)]
    assert sentence_speakers([(0, 800), (900, 1000)], turns) == [0, 0]
    # 1's 500 take the lead from 0's 2 x 200.
    assert sentence_speakers([(100, 800)], [*turns[:1], SpeakerTurn(300, 800, 1)]) == [1]
    assert turns_json(turns[:1]) == [{"start": 0, "end": 300, "spk": 0}]
