"""An offline result's speaker fields without a socket (``gateway.funasr.speaker_fields``):
the speaker stream's and the clips' results in, each sentence's ``spk`` and ``spk_name``
and the frame's ``speakers`` and ``speaker_names`` out; through ``WholeText`` too."""

from __future__ import annotations

import json

import pytest

from gateway.funasr.known_speakers import KnownSpeaker
from gateway.funasr.results import Label, WholeText
from gateway.funasr.speaker_fields import SpeakerFields
from shared.messages import Decoded, SentenceStamp, SpeakerTurn, StreamResult

TURNS = (SpeakerTurn(0, 1000, 0), SpeakerTurn(1000, 2000, 1), SpeakerTurn(2000, 3000, 0))
LOW, HIGH, ELSE = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)


def speaker_result(voiceprints: tuple[tuple[float, ...], ...] = (LOW, HIGH)) -> StreamResult:
    return StreamResult(1, 0, Decoded(speakers=TURNS, voiceprints=voiceprints), True)


def clip_result(*voiceprints: tuple[float, ...]) -> StreamResult:
    return StreamResult(1, 0, Decoded(voiceprints=voiceprints), True)


def sentences() -> list[dict[str, object]]:
    return [{"start": 100, "end": 900}, {"start": 1100, "end": 1900}, {"start": 2100, "end": 2900}]


def fields_of(speakers: SpeakerFields) -> tuple[list[dict[str, object]], dict[str, object]]:
    said, extra = sentences(), dict[str, object]()
    speakers.add_to(said, extra)
    return said, extra


def test_each_clip_names_the_speaker_it_sounds_like() -> None:
    speakers = SpeakerFields(["bob", "alice"])
    assert speakers.streams == 3
    speakers.push(StreamResult(0, 0, Decoded(), False))  # the speaker stream's first says nothing
    speakers.push(speaker_result())
    speakers.push(clip_result(HIGH))
    speakers.push(clip_result(LOW))
    said, extra = fields_of(speakers)
    assert [(s["spk"], s["spk_name"]) for s in said] == [(0, "alice"), (1, "bob"), (0, "alice")]
    assert extra["speaker_names"] == {"0": "alice", "1": "bob"}
    assert extra["speakers"] == [{"start": t.start, "end": t.end, "spk": t.speaker} for t in TURNS]


def test_a_clip_like_no_speaker_and_one_with_no_voiceprint_name_no_one() -> None:
    speakers = SpeakerFields(["dora", "eve", "alice"])
    speakers.push(speaker_result())
    speakers.push(clip_result(ELSE))  # cosine 0 with both speakers
    speakers.push(clip_result())  # the pool gave the clip no voiceprint
    speakers.push(clip_result(LOW))
    said, extra = fields_of(speakers)
    assert [s["spk"] for s in said] == [0, 1, 0]  # the ints stay, named or not
    assert [s.get("spk_name") for s in said] == ["alice", None, "alice"]
    assert extra["speaker_names"] == {"0": "alice"}


def test_the_servers_known_speakers_name_too_and_a_clip_counts_over_them() -> None:
    server = (KnownSpeaker("alice", LOW), KnownSpeaker("bob", HIGH))
    speakers = SpeakerFields([], server)
    assert speakers.streams == 1
    speakers.push(speaker_result())
    assert fields_of(speakers)[1]["speaker_names"] == {"0": "alice", "1": "bob"}
    # The config's alice is the high voice: the server's alice no longer counts.
    speakers = SpeakerFields(["alice"], server)
    speakers.push(speaker_result())
    speakers.push(clip_result(HIGH))
    assert fields_of(speakers)[1]["speaker_names"] == {"1": "alice"}


def test_without_known_speakers_the_fields_are_labels_only() -> None:
    speakers = SpeakerFields()
    speakers.push(speaker_result())
    said, extra = fields_of(speakers)
    assert [s["spk"] for s in said] == [0, 1, 0]
    assert all("spk_name" not in s for s in said)
    assert extra["speaker_names"] == {}


def test_the_names_wait_for_every_stream() -> None:
    speakers = SpeakerFields(["alice"])
    speakers.push(speaker_result())
    with pytest.raises(AssertionError, match="every speaker stream"):
        speakers.names()


def test_whole_text_reads_the_clips_streams_after_the_speaker_stream() -> None:
    frames = WholeText(
        "offline",
        Label("offline", "w"),
        final=True,
        offsets_ms=[0],
        text_is_delta=False,
        speakers=SpeakerFields(["bob", "alice"]),
    )
    said = (
        SentenceStamp("a", "。", 100, 900, ((100, 900),)),
        SentenceStamp("b", "。", 1100, 1900, ((1100, 1900),)),
    )
    for result in (
        StreamResult(1, 0, Decoded("a。b。", sentences=said), True),
        speaker_result(),
        clip_result(HIGH),
        clip_result(LOW),
    ):
        assert frames.push(result, 0) == []
    (frame,) = frames.finish()
    message = json.loads(frame)
    assert message["text"] == "a。b。"
    stamp_sents = message["stamp_sents"]
    assert [(s["spk"], s["spk_name"]) for s in stamp_sents] == [(0, "alice"), (1, "bob")]
    assert message["speaker_names"] == {"0": "alice", "1": "bob"}
    assert [turn["spk"] for turn in message["speakers"]] == [0, 1, 0]
