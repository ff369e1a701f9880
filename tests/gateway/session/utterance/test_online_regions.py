"""``online`` on a model whose streams are speech regions (streaming SenseVoice), sans I/O:
a pass per region, nothing held, frames that add or revise across regions, one final."""

from __future__ import annotations

import json
from dataclasses import replace

from gateway.funasr.config import SessionConfig
from gateway.funasr.results import Label, Partials
from gateway.funasr.running_text import RunningText, running_frame_text
from gateway.funasr.two_pass_frames import SentencePartials, ShownPartials
from gateway.session.utterance import utterance_for
from gateway.session.utterance.actions import HoldAudio, OpenStream, Pool, RelayResults
from shared.messages import Decoded, SpeechTags, StreamResult
from tests.helpers.utterance import SETTINGS, audio_of, loud, opened, quiet

CONFIG = SessionConfig(mode="online", chunk_size=(0, 1, 5))  # 1920-byte chunks
REGIONS = replace(SETTINGS, streaming_regions=True)


def result(text: str, *, final: bool = False, seq: int = 0) -> StreamResult:
    tags = SpeechTags("zh", "neutral", "speech")
    return StreamResult(0, seq, Decoded(text, tags=tags), is_final=final)


def test_a_running_value_goes_as_what_it_adds_or_whole_when_it_revises() -> None:
    assert running_frame_text("", "你好") == ("你好", False)
    assert running_frame_text("你好", "你好世界") == ("世界", False)
    assert running_frame_text("你好世界", "你好世界") == ("", False)
    assert running_frame_text("你好世界", "你们好") == ("你们好", True)


def test_each_region_is_a_streaming_pass_of_its_own_and_nothing_is_held() -> None:
    utterance = utterance_for(CONFIG, REGIONS, vad=False)
    actions = utterance.start()
    first = quiet(600) + loud(600) + quiet(300)  # the endpointer ends it after the silence
    second = loud(300)
    actions += utterance.audio(first + second)
    actions += utterance.end()
    passes = opened(actions, Pool.STREAMING)
    assert len(passes) == 2
    assert opened(actions, Pool.WHOLE) == []  # no offline pass
    assert not any(isinstance(action, HoldAudio) for action in actions)
    assert audio_of(actions, passes[0]) == first
    assert audio_of(actions, passes[1]) == second
    relays = [a for a in actions if isinstance(a, RelayResults)]
    assert [(len(r.streams), r.last) for r in relays] == [(1, False), (1, False), (0, True)]
    assert {r.frames.mode for r in relays} == {"online"}


def test_frames_add_across_regions_revise_whole_and_only_the_last_region_is_final() -> None:
    utterance = utterance_for(CONFIG, REGIONS, vad=False)
    actions = utterance.start()
    actions += utterance.audio(loud(600) + quiet(900) + loud(300))
    actions += utterance.end()
    first, second, _ = (a.frames for a in actions if isinstance(a, RelayResults))
    assert isinstance(first, Partials)
    frames = [
        *first.push(result("你好"), 0),
        *first.push(result("你好吗"), 0),
        *first.push(result("您好吗", final=True), 0),  # the region's whole decode
        *second.push(result("再见"), 0),
        *second.push(result("再见", final=True), 0),
    ]
    sent = [json.loads(frame) for frame in frames]
    assert [(f["text"], f.get("revised", False), f["is_final"]) for f in sent] == [
        ("你好", False, False),
        ("吗", False, False),
        ("您好吗", True, False),
        (" 再见", False, False),  # joined as FunASR joins its segments' texts
        ("", False, True),
    ]
    assert all(f["language"] == "zh" and f["emotion"] == "neutral" for f in sent)


def test_an_earlier_regions_final_after_the_end_is_not_the_utterances() -> None:
    """The utterance ends while the first region's final result is still to come: only
    the last region's final result is marked final."""
    running = RunningText()
    assert running.take("甲", False) == ("甲", False, False)
    running.last_region = 2
    assert running.take("甲", True) == ("", False, False)
    assert running.take("乙", True) == (" 乙", False, True)


def test_a_2pass_sentences_revision_carries_the_whole_online_text() -> None:
    """FunASR's clients hold the partials of every sentence not settled: a revising frame
    of the second sentence carries the first's partials too."""
    shown = ShownPartials()
    first = SentencePartials(
        shown, 1, _label(), timing=False, chunk_bytes=0, origin_bytes=0, running=True
    )
    second = SentencePartials(
        shown, 2, _label(), timing=False, chunk_bytes=0, origin_bytes=0, running=True
    )
    texts = [
        json.loads(frame)
        for frame in [
            *first.push(result("一二"), 0),
            *second.push(result("三"), 0),
            *second.push(result("四五"), 0),
        ]
    ]
    assert [(f["text"], f.get("revised", False)) for f in texts] == [
        ("一二", False),
        ("三", False),
        ("一二四五", True),
    ]
    assert shown.settle(1) == "四五"  # resent after the first sentence's offline frame


def _label() -> Label:
    return Label("2pass", "w")


def test_a_2pass_streaming_pass_asks_no_final_decode_of_a_regions_model() -> None:
    """Its offline pass decodes the sentence whole; a plain streaming model's pass is
    unchanged."""
    config = replace(CONFIG, mode="2pass")
    for settings, final_decode in ((REGIONS, False), (SETTINGS, True)):
        actions = utterance_for(config, settings, vad=False).start()
        (opening,) = [a for a in actions if isinstance(a, OpenStream)]
        assert opening.options.final_decode is final_decode
