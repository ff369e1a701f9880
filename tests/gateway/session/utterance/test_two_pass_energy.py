"""``2pass`` with the energy endpointer as a sans-I/O utterance: sentences cut at pauses."""

from __future__ import annotations

import json
from dataclasses import replace

from gateway.funasr.config import SessionConfig
from gateway.funasr.results import Partials, WholeText
from gateway.session.utterance import utterance_for
from gateway.session.utterance.actions import (
    Action,
    HoldAudio,
    OpenStream,
    Pool,
    RelayResults,
    ReleaseAudio,
)
from shared.messages import Decoded, StreamResult
from tests.helpers.utterance import SETTINGS, audio_of, loud, names, opened, quiet
from workers.pool import Urgency

CONFIG = SessionConfig(mode="2pass", chunk_size=(0, 1, 5))  # 1920-byte chunks
SENTENCE_END = [
    "FinishStream",  # this sentence's streaming pass
    "OpenStream",  # its offline pass
    "RelayResults",
    "FinishStream",
    "ReleaseAudio",
]
NEXT_SENTENCE = ["OpenStream", "RelayResults"]  # the next sentence's streaming pass


def relays(actions: list[Action]) -> list[RelayResults]:
    return [a for a in actions if isinstance(a, RelayResults)]


def test_the_config_opens_a_streaming_pass_that_is_never_final() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    actions = utterance.start()
    assert names(actions) == NEXT_SENTENCE
    (relay,) = relays(actions)
    assert isinstance(relay.frames, Partials)
    assert relay.frames.mode == "2pass-online"
    assert not relay.frames.final
    assert not relay.last


def test_a_pause_ends_a_sentence_exactly_where_the_endpointer_puts_it() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    actions = utterance.start()
    first = quiet(600) + loud(600) + quiet(300)  # the endpointer ends it after the silence
    second = loud(300)
    actions += utterance.audio(first + second)
    actions += utterance.end()
    online = opened(actions, Pool.STREAMING)
    offline = opened(actions, Pool.WHOLE)
    assert len(online) == len(offline) == 2
    # Every byte goes to exactly one sentence's streaming pass ...
    assert audio_of(actions, online[0]) == first
    assert audio_of(actions, online[1]) == second
    # ... and its offline pass, from the preroll before its speech.
    assert audio_of(actions, offline[0]) == first[300 * 32 :]
    assert audio_of(actions, offline[1]) == second
    passes = relays(actions)
    assert [r.frames.mode for r in passes] == [
        "2pass-online",
        "2pass-offline",
        "2pass-online",
        "2pass-offline",
    ]
    assert [r.last for r in passes] == [False, False, False, True]
    last = passes[-1].frames
    assert isinstance(last, WholeText)
    assert last.final


def test_only_the_last_sentences_offline_pass_is_urgent() -> None:
    """The final after the end of input is what a client waits for: a niced offline pool
    decodes that sentence at nice 0, the ones before it (and every streaming pass) niced."""
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    actions = utterance.start() + utterance.audio(loud(600) + quiet(300) + loud(600) + quiet(300))
    actions += utterance.audio(loud(300)) + utterance.end()
    opening = [a for a in actions if isinstance(a, OpenStream)]
    offline = [a.urgency for a in opening if a.stream.pool is Pool.WHOLE]
    assert offline == [Urgency.BACKGROUND, Urgency.BACKGROUND, Urgency.URGENT]
    assert {a.urgency for a in opening if a.stream.pool is Pool.STREAMING} == {Urgency.BACKGROUND}


def test_offline_passes_are_relayed_behind_the_next_sentences_partials() -> None:
    """Each sentence's offline pass is a background pass, and settling it resends the
    later sentences' partials: the frames of one utterance share what they have shown."""
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    actions = utterance.start() + utterance.audio(loud(600) + quiet(300) + loud(300))
    actions += utterance.end()
    passes = relays(actions)
    assert [r.frames.background for r in passes] == [False, True, False, True]
    first_offline, second_partials = passes[1].frames, passes[2].frames
    second_partials.push(StreamResult(0, 0, Decoded("later"), False), worker=0)
    first_offline.push(StreamResult(0, 0, Decoded("first."), True), worker=0)
    offline, resent = (json.loads(frame) for frame in first_offline.finish())
    assert (offline["mode"], offline["text"]) == ("2pass-offline", "first.")
    assert (resent["mode"], resent["text"], resent["resent"]) == ("2pass-online", "later", True)


def test_the_sentence_end_sequence() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    utterance.start()
    actions = utterance.audio(loud(600) + quiet(300))
    end = names(actions).index("FinishStream")
    assert names(actions)[end:] == SENTENCE_END + NEXT_SENTENCE
    held = sum(a.size for a in actions if isinstance(a, HoldAudio))
    assert ReleaseAudio(held) in actions  # the sentence's audio is given back once decoded


def test_offline_timestamps_count_from_the_start_of_the_utterance() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    utterance.start()
    actions = utterance.audio(loud(600) + quiet(300) + quiet(900) + loud(600) + quiet(300))
    second = [r.frames for r in relays(actions) if r.frames.mode == "2pass-offline"][1]
    second.push(StreamResult(0, 0, Decoded("text", timestamps=((0, 100),)), True), worker=0)
    (frame,) = second.finish()
    # The second sentence starts at 900 ms, its offline pass 900 ms later less the preroll.
    assert json.loads(frame)["timestamp"] == "[[1500,1600]]"


def test_a_sentence_without_a_pause_ends_at_the_segment_limit() -> None:
    settings = replace(SETTINGS, max_segment_bytes=1500 * 32)
    utterance = utterance_for(CONFIG, settings, vad=False)
    actions = utterance.start()
    actions += utterance.audio(loud(2000)) + utterance.end()
    online = opened(actions, Pool.STREAMING)
    assert len(online) == 2
    assert len(audio_of(actions, online[0])) <= 1500 * 32
    assert audio_of(actions, online[0]) + audio_of(actions, online[1]) == loud(2000)
