"""``offline`` as a sans-I/O utterance: held whole, decoded at the end, in segments when
long."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from gateway.audio.segment import Segment, Speech
from gateway.funasr.config import SessionConfig
from gateway.funasr.known_speakers import Clip, KnownSpeaker
from gateway.funasr.results import Label, WholeText
from gateway.funasr.speaker_fields import SpeakerFields
from gateway.session.utterance import utterance_for
from gateway.session.utterance.actions import (
    FindSegments,
    FindSpeech,
    FinishStream,
    HoldAudio,
    OpenStream,
    Pool,
    RelayResults,
    ReleaseAudio,
)
from shared.errors import ProtocolError
from shared.messages import Decoded, SentenceStamp, SpeakerTurn, StreamResult
from tests.helpers.utterance import SETTINGS, audio_of, loud, names, opened
from workers.pool import Urgency

CONFIG = SessionConfig(mode="offline", wav_name="w", hotwords=("阿里巴巴",))


def clip(name: str, seconds: float) -> Clip:
    samples = np.frombuffer(loud(int(seconds * 1000)), dtype=np.int16)
    return Clip(name, samples, seconds)


def test_audio_is_held_and_nothing_is_opened_before_the_end() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    assert utterance.start() == []
    assert utterance.audio(bytes(640)) == [HoldAudio(640)]
    assert utterance.audio(bytes(320)) == [HoldAudio(320)]


def test_the_end_decodes_the_whole_utterance_in_one_stream() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    pcm = loud(300)
    utterance.audio(pcm[:5000])
    utterance.audio(pcm[5000:])
    actions = utterance.end()
    assert names(actions) == ["OpenStream", "RelayResults", "FinishStream", "ReleaseAudio"]
    (stream,) = opened(actions, Pool.WHOLE)
    open_stream, relay = actions[0], actions[1]
    assert isinstance(open_stream, OpenStream)
    assert open_stream.options.hotwords == ("阿里巴巴",)
    assert isinstance(relay, RelayResults)
    assert relay.streams == (stream,)
    assert relay.last
    assert isinstance(relay.frames, WholeText)
    assert relay.frames.mode == "offline"
    assert relay.frames.final
    assert audio_of(actions, stream) == pcm
    assert actions[-1] == ReleaseAudio(len(pcm))
    # Whole audio may wait behind the streams' chunks in a niced offline pool (its
    # ASR_OFFLINE_NICE says so); the nice-0 seats are kept for the 2pass finals.
    assert open_stream.urgency is Urgency.BACKGROUND


def test_hotwords_changed_mid_utterance_decode_at_its_end() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    utterance.audio(bytes(640))
    utterance.update(replace(CONFIG, hotwords=("达摩院",)))
    open_stream = utterance.end()[0]
    assert isinstance(open_stream, OpenStream)
    assert open_stream.options.hotwords == ("达摩院",)


def test_long_audio_asks_where_to_cut_then_decodes_every_segment_at_once() -> None:
    settings = replace(SETTINGS, max_segment_bytes=1000 * 32)
    utterance = utterance_for(CONFIG, settings, vad=False)
    pcm = loud(2500)
    utterance.audio(pcm)
    (question,) = utterance.end()
    assert isinstance(question, FindSegments)
    assert bytes(question.pcm) == pcm
    segments = [Segment(0, 900 * 32), Segment(900 * 32, 1800 * 32), Segment(1800 * 32, len(pcm))]
    actions = utterance.segments_found(segments)
    assert names(actions) == [
        *["OpenStream"] * 3,
        "RelayResults",
        *["FinishStream"] * 3,
        "ReleaseAudio",
    ]
    streams = opened(actions, Pool.WHOLE)
    relay = actions[3]
    assert isinstance(relay, RelayResults)
    assert relay.streams == tuple(streams)  # one pass: one result for them all
    for stream, segment in zip(streams, segments, strict=True):
        assert audio_of(actions, stream) == pcm[segment.start : segment.end]
    assert actions[-1] == ReleaseAudio(len(pcm))


def test_the_resampler_tail_is_held_before_the_decode() -> None:
    utterance = utterance_for(replace(CONFIG, audio_fs=8000), SETTINGS, vad=False)
    held = sum(a.size for a in utterance.audio(bytes(8000)) if isinstance(a, HoldAudio))
    actions = utterance.end()
    held += sum(a.size for a in actions if isinstance(a, HoldAudio))
    (finish,) = [a for a in actions if isinstance(a, FinishStream)]
    assert held == len(finish.pcm) == 16000
    assert actions[-1] == ReleaseAudio(16000)


def test_spk_asks_where_the_speech_is_then_decodes_beside_a_speaker_stream() -> None:
    settings = replace(SETTINGS, max_segment_bytes=1000 * 32, speakers=True)
    utterance = utterance_for(replace(CONFIG, spk=True), settings, vad=True)
    pcm = loud(2500)
    utterance.audio(pcm)
    (question,) = utterance.end()
    assert isinstance(question, FindSpeech)
    assert bytes(question.pcm) == pcm
    speech = Speech(((100 * 32, 1200 * 32), (1400 * 32, 2400 * 32)), len(pcm))
    (cut,) = utterance.speech_found(speech)  # then: where to cut it
    assert isinstance(cut, FindSegments)
    assert cut.speech == speech  # the same VAD pass: the VAD is not asked again
    segments = [Segment(0, 1300 * 32), Segment(1300 * 32, len(pcm))]
    actions = utterance.segments_found(segments)
    (speaker,) = opened(actions, Pool.SPEAKER)
    streams = opened(actions, Pool.WHOLE)
    opening = next(a for a in actions if isinstance(a, OpenStream) and a.stream is speaker)
    assert opening.options.speech_regions == ((100, 1200), (1400, 2400))
    (relay,) = [a for a in actions if isinstance(a, RelayResults)]
    assert relay.streams == (*streams, speaker)  # its turns come after every segment's text
    assert isinstance(relay.frames, WholeText)
    assert audio_of(actions, speaker) == pcm
    assert actions[-1] == ReleaseAudio(len(pcm))


def test_spk_embeds_each_known_speakers_clip_in_a_stream_of_its_own() -> None:
    settings = replace(SETTINGS, speakers=True, known_speakers=(KnownSpeaker("carol", (1.0,)),))
    clips = [clip("alice", 2.0), clip("bob", 3.5)]
    utterance = utterance_for(replace(CONFIG, spk=True), settings, vad=True, clips=clips)
    pcm = loud(2500)
    utterance.audio(pcm)
    # The clips' samples are held with the audio from the end, before the VAD is asked.
    hold, question = utterance.end()
    assert hold == HoldAudio(2 * (32000 + 56000))
    assert isinstance(question, FindSpeech)
    actions = utterance.speech_found(Speech(((100 * 32, 2400 * 32),), len(pcm)))
    (stream,) = opened(actions, Pool.WHOLE)
    speaker, alice, bob = opened(actions, Pool.SPEAKER)
    regions = {a.stream: a.options.speech_regions for a in actions if isinstance(a, OpenStream)}
    assert regions[alice] == ((0, 2000),)  # each clip one region, as a file's reference
    assert regions[bob] == ((0, 3500),)
    (relay,) = [a for a in actions if isinstance(a, RelayResults)]
    assert relay.streams == (stream, speaker, alice, bob)  # the clips after the speakers
    assert audio_of(actions, alice) == clips[0].samples.tobytes()
    assert audio_of(actions, bob) == clips[1].samples.tobytes()
    assert actions[-1] == ReleaseAudio(len(pcm) + 2 * (32000 + 56000))
    assert isinstance(relay.frames, WholeText)
    # What the frames will name the speakers by: the clips, then the server's carol.
    for result in (
        StreamResult(1, 0, Decoded("a"), True),
        StreamResult(
            1, 0, Decoded(speakers=(SpeakerTurn(0, 900, 0),), voiceprints=((1.0,),)), True
        ),
        StreamResult(1, 0, Decoded(voiceprints=((0.5,),)), True),
        StreamResult(1, 0, Decoded(voiceprints=((-1.0,),)), True),
    ):
        relay.frames.push(result, 0)
    assert json.loads(relay.frames.finish()[0])["speaker_names"] == {"0": "alice"}


def test_clips_without_spk_are_not_used() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False, clips=[clip("alice", 2.0)])
    utterance.audio(loud(300))
    actions = utterance.end()
    assert opened(actions, Pool.SPEAKER) == []
    assert actions[-1] == ReleaseAudio(300 * 32)


def test_spk_is_refused_in_online_mode_and_without_a_speaker_model() -> None:
    with pytest.raises(ProtocolError, match="offline and 2pass modes"):
        utterance_for(SessionConfig(mode="online", spk=True), SETTINGS, vad=False)
    with pytest.raises(ProtocolError, match="no speaker model"):
        utterance_for(replace(CONFIG, spk=True), SETTINGS, vad=False)


def test_whole_text_with_speakers_labels_each_sentence_from_the_last_streams_turns() -> None:
    frames = WholeText(
        "offline",
        Label("offline", "w"),
        final=True,
        offsets_ms=[0],
        text_is_delta=False,
        speakers=SpeakerFields(),
    )
    sentence = SentenceStamp("a b", "。", 100, 900, ((100, 500), (500, 900)))
    later = SentenceStamp("c", "", 1500, 1900, ((1500, 1900),))
    frames.push(StreamResult(1, 0, Decoded("ab。c", sentences=(sentence, later)), True), 0)
    turns = (SpeakerTurn(0, 1000, 0), SpeakerTurn(1000, 2000, 1))
    frames.push(StreamResult(2, 0, Decoded(speakers=turns), True), 1)
    (frame,) = frames.finish()
    message = json.loads(frame)
    assert message["text"] == "ab。c"
    assert [s["spk"] for s in message["stamp_sents"]] == [0, 1]
    assert message["speakers"] == [
        {"start": 0, "end": 1000, "spk": 0},
        {"start": 1000, "end": 2000, "spk": 1},
    ]
