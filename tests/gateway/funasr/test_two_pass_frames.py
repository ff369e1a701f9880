"""A 2pass utterance's frames as FunASR's clients show them (sans I/O): each sentence's
partials go out as they come, its offline frame once decoded, and the partials that frame
clears are resent right after it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway.funasr.results import Label
from gateway.funasr.two_pass_frames import (
    SentencePartials,
    SentenceText,
    ShownPartials,
    resent_partials,
)
from shared.messages import Decoded, StreamResult


@dataclass
class FunasrView:
    """What FunASR's HTML5 page shows (main.js ``getJsonMessage`` @3c58cb5; its Python
    client's ``text_print_2pass_*`` do the same): the offline texts, then the partials
    received since the last offline frame."""

    offline: str = ""
    shown: str = ""
    history: list[str] = field(default_factory=list)

    def receive(self, frame: str) -> None:
        message = json.loads(frame)
        if message["mode"] in ("2pass-offline", "offline"):
            self.offline += message["text"]
            self.shown = self.offline
        else:
            self.shown += message["text"]
        self.history.append(self.shown)


class Utterance:
    """A 2pass utterance's frame builders, one pair per sentence, as ``TwoPass`` makes them."""

    def __init__(self, sentences: int) -> None:
        shown = ShownPartials()
        label = Label("2pass", "w")
        self.partials = [
            SentencePartials(shown, k, label, timing=False, chunk_bytes=0, origin_bytes=0)
            for k in range(sentences)
        ]
        self.texts = [
            SentenceText(
                shown, k, label, final=k == sentences - 1, offset_ms=0, text_is_delta=False
            )
            for k in range(sentences)
        ]

    def partial(self, sentence: int, text: str) -> list[str]:
        return self.partials[sentence].push(
            StreamResult(sentence, 0, Decoded(text), False), worker=0
        )

    def offline(self, sentence: int, text: str) -> list[str]:
        self.texts[sentence].push(StreamResult(sentence, 0, Decoded(text), True), worker=0)
        return self.texts[sentence].finish()


def messages(frames: list[str]) -> list[dict[str, Any]]:
    return [json.loads(frame) for frame in frames]


def test_the_next_sentences_partials_are_resent_after_an_offline_frame() -> None:
    utterance = Utterance(2)
    view = FunasrView()
    for frame in utterance.partial(0, "a") + utterance.partial(0, "b"):
        view.receive(frame)
    # Sentence 1's partials while sentence 0's offline decode is pending: shown at once.
    for frame in utterance.partial(1, "c") + utterance.partial(1, "d"):
        view.receive(frame)
    assert view.shown == "abcd"
    offline = utterance.offline(0, "AB.")
    assert [m["mode"] for m in messages(offline)] == ["2pass-offline", "2pass-online"]
    assert messages(offline)[1]["text"] == "cd"
    for frame in offline:
        view.receive(frame)
    assert view.shown == "AB.cd"  # sentence 1's partials, cleared and given back
    for frame in utterance.partial(1, "e") + utterance.offline(1, "CDE."):
        view.receive(frame)
    assert view.history == ["a", "ab", "abc", "abcd", "AB.", "AB.cd", "AB.cde", "AB.CDE."]


def test_with_several_offline_decodes_pending_each_resend_holds_every_later_sentence() -> None:
    utterance = Utterance(3)
    view = FunasrView()
    frames = utterance.partial(0, "a") + utterance.partial(1, "b") + utterance.partial(2, "c")
    frames += utterance.offline(0, "A.")
    frames += utterance.partial(2, "d")
    frames += utterance.offline(1, "B.")
    frames += utterance.offline(2, "CD.")
    for frame in frames:
        view.receive(frame)
    resends = [m["text"] for m in messages(frames) if m.get("resent")]
    assert resends == ["bc", "cd"]
    assert view.history == ["a", "ab", "abc", "A.", "A.bc", "A.bcd", "A.B.", "A.B.cd", "A.B.CD."]


def test_at_every_frame_the_view_is_the_offline_texts_then_the_unsettled_partials() -> None:
    """Any order the writer may produce: partials in sentence order, each offline frame
    after its own sentence's partials, offline frames in order. The view never drops a
    partial of an unsettled sentence and never holds one twice."""
    utterance = Utterance(3)
    view = FunasrView()
    partials: dict[int, str] = {0: "", 1: "", 2: ""}
    settled: list[str] = []
    steps = [
        ("p", 0, "x0"),
        ("p", 0, "y0"),
        ("p", 1, "x1"),
        ("o", 0, "S0"),
        ("p", 1, "y1"),
        ("p", 2, "x2"),
        ("o", 1, "S1"),
        ("p", 2, "y2"),
        ("o", 2, "S2"),
    ]
    for kind, sentence, text in steps:
        if kind == "p":
            frames = utterance.partial(sentence, text)
            partials[sentence] += text
        else:
            frames = utterance.offline(sentence, text)
            settled.append(text)
        for frame in frames:
            view.receive(frame)
        unsettled = "".join(partials[k] for k in range(len(settled), 3))
        assert view.shown == "".join(settled) + unsettled
    assert view.shown == "S0S1S2"


def test_the_last_offline_frame_is_final_and_nothing_follows_it() -> None:
    utterance = Utterance(2)
    utterance.partial(0, "a")
    utterance.partial(1, "b")
    utterance.offline(0, "A.")
    (last,) = messages(utterance.offline(1, "B."))
    assert (last["mode"], last["is_final"], last["text"]) == ("2pass-offline", True, "B.")


def test_nothing_is_resent_when_the_later_sentences_have_shown_nothing() -> None:
    utterance = Utterance(2)
    utterance.partial(0, "a")
    utterance.partial(1, "")  # a chunk with no text makes no frame
    assert [m["mode"] for m in messages(utterance.offline(0, "A."))] == ["2pass-offline"]


def test_a_resend_is_a_partial_with_funasrs_fields_and_no_chunk_timing() -> None:
    assert json.loads(resent_partials("你好", "demo")) == {
        "mode": "2pass-online",
        "text": "你好",
        "wav_name": "demo",
        "is_final": False,
        "resent": True,
    }


def test_timed_partials_are_recorded_with_their_text() -> None:
    shown = ShownPartials()
    label = Label("2pass", "w")
    partials = SentencePartials(shown, 1, label, timing=True, chunk_bytes=1920, origin_bytes=0)
    (frame,) = partials.push(StreamResult(0, 0, Decoded(), False), worker=0)  # timed: sent, no text
    assert json.loads(frame)["text"] == ""
    partials.push(StreamResult(0, 1, Decoded("hi"), False), worker=0)
    assert shown.settle(0) == "hi"
    assert shown.settle(1) == ""


def test_settling_a_sentence_forgets_it_and_every_earlier_one() -> None:
    shown = ShownPartials()
    for sentence, text in [(0, "a"), (1, "b"), (2, "c"), (2, "d")]:
        shown.sent(sentence, text)
    assert shown.settle(1) == "cd"  # sentence 0's too: settled offline frames come in order
    assert shown.settle(2) == ""
