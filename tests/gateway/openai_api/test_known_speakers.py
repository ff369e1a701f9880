"""gateway.openai_api.known_speakers without a socket: OpenAI's known speakers read from a
form, bounded and decoded as files are, their cost added to the file's, and the names they
give; and diarized_json's speakers named by them."""

from __future__ import annotations

import base64
import io
from dataclasses import replace

import numpy as np
import pytest
import soundfile

from gateway.files.errors import TranscribeError
from gateway.files.multipart import Form
from gateway.funasr.known_speakers import (
    MAX_KNOWN_SPEAKERS,
    REFERENCE_MAX_BYTES,
    Clip,
    KnownSpeaker,
)
from gateway.openai_api.formats import FileTranscript, TimedSegment, diarized_json
from gateway.openai_api.known_speakers import (
    NAMES,
    REFERENCES,
    Enrolment,
    check_cost,
    enrol,
    names_of,
    reference_texts,
)
from gateway.whole.speakers import Speakers
from shared.messages import SpeakerTurn


def wav(seconds: float, rate: int = 16000, channels: int = 1) -> bytes:
    rng = np.random.default_rng(1)
    samples = rng.uniform(-0.3, 0.3, (int(seconds * rate), channels))
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def data_url(data: bytes) -> str:
    return "data:audio/wav;base64," + base64.b64encode(data).decode()


def form(names: list[str], references: list[str], dropped: int = 0) -> Form:
    fields = {NAMES: tuple(names), REFERENCES: tuple(references)}
    return Form(b"RIFF", "a.wav", fields, {REFERENCES: dropped} if dropped else {})


def refusal(form: Form) -> TranscribeError:
    with pytest.raises(TranscribeError) as refused:
        reference_texts(form)
    assert refused.value.status == 400
    assert refused.value.reason == "bad_known_speakers"
    return refused.value


def test_names_and_references_pair_up() -> None:
    assert reference_texts(form(["alice"], ["x"])) == (("alice",), ("x",))
    assert reference_texts(form([], [])) == ((), ())
    assert "pair up" in refusal(form(["alice", "bob"], ["x"])).message
    assert "pair up" in refusal(form(["alice"], [])).message


def test_a_reference_the_form_read_past_is_refused_for_its_size_or_count() -> None:
    # Read past while fewer than four were kept: too large.
    message = refusal(form(["a", "b"], ["x"], dropped=1)).message
    assert f"at most {REFERENCE_MAX_BYTES} bytes" in message
    # Read past once four were kept: one too many.
    names = [str(n) for n in range(MAX_KNOWN_SPEAKERS + 1)]
    message = refusal(form(names, ["x"] * MAX_KNOWN_SPEAKERS, dropped=1)).message
    assert f"at most {MAX_KNOWN_SPEAKERS}" in message


@pytest.mark.anyio
async def test_clips_are_decoded_as_files_are() -> None:
    enrolment = await enrol(
        form(["alice", "bob"], [data_url(wav(3.0)), data_url(wav(2.5, 44100, 2))]),
        wav(1.0),
        max_seconds=60.0,
    )
    assert [clip.name for clip in enrolment.clips] == ["alice", "bob"]
    assert [clip.seconds for clip in enrolment.clips] == [3.0, 2.5]
    assert len(enrolment.clips[0].samples) == 48000
    assert abs(len(enrolment.clips[1].samples) - 40000) <= 1  # resampled to 16 kHz


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("clip", "why"),
    [
        (data_url(wav(1.5)), r"known_speaker_references\[0\] \(alice\): the clip lasts 1.50 s"),
        (data_url(wav(10.5)), "a reference lasts 2 to 10 s"),
        (data_url(b"ID3 an mp3"), "not a WAV file"),
        ("data:audio/wav;base64,%%%", "not valid base64"),
        ("https://example.com/alice.wav", "not valid base64"),
    ],
)
async def test_a_bad_clip_is_a_400_naming_it(clip: str, why: str) -> None:
    with pytest.raises(TranscribeError, match=why) as refused:
        await enrol(form(["alice"], [clip]), wav(1.0), max_seconds=60.0)
    assert (refused.value.status, refused.value.reason) == (400, "bad_known_speakers")


@pytest.mark.anyio
async def test_the_references_seconds_count_with_the_files_before_either_is_decoded() -> None:
    references = form(["alice"], [data_url(wav(6.0))])
    assert len((await enrol(references, wav(3.0), max_seconds=9.0)).clips) == 1
    with pytest.raises(TranscribeError, match="more than 8 s together") as refused:
        await enrol(references, wav(3.0), max_seconds=8.0)
    assert (refused.value.status, refused.value.reason) == (413, "too_long")
    check_cost(wav(9.0), 0.0, max_seconds=8.0)  # no references: the file's own check


def test_a_reference_names_the_speaker_it_sounds_like_before_the_servers() -> None:
    speakers = Speakers(
        turns=(SpeakerTurn(0, 1000, 0), SpeakerTurn(1000, 2000, 1)),
        voiceprints=((1.0, 0.0), (0.0, 1.0)),
        references=((0.0, 1.0), ()),  # the second clip gave no voiceprint: it names no one
    )
    clips = Enrolment(tuple(_clip(name) for name in ("bob", "carol")))
    server = (KnownSpeaker("alice", (1.0, 0.0)), KnownSpeaker("bob", (1.0, 0.0)))
    # The request's bob (speaker 1's voice) counts, not the server's (speaker 0's).
    assert names_of(speakers, clips, server) == {0: "alice", 1: "bob"}
    assert names_of(replace(speakers, references=()), Enrolment(), ()) == {}


def _clip(name: str) -> Clip:
    return Clip(name, np.zeros(32000, np.int16), 2.0)


def test_diarized_json_names_the_known_and_letters_the_others() -> None:
    turns = (SpeakerTurn(0, 1000, 0), SpeakerTurn(1000, 2000, 1), SpeakerTurn(2000, 3000, 2))
    words = ("one", "two", "three")
    transcript = FileTranscript(
        text=" ".join(words),
        duration_s=3.0,
        language="",
        segments=tuple(TimedSegment(n * 1000, n * 1000 + 1000, w) for n, w in enumerate(words)),
        speaker_turns=turns,
    )

    def speakers(transcript: FileTranscript) -> list[object]:
        segments = diarized_json(transcript)["segments"]
        assert isinstance(segments, list)
        return [segment["speaker"] for segment in segments]

    # The others keep the letters they have unnamed: C stays C.
    assert speakers(replace(transcript, speaker_names={1: "alice"})) == ["A", "alice", "C"]
    assert speakers(transcript) == ["A", "B", "C"]
