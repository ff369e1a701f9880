"""``online`` as a sans-I/O utterance: events in, actions out."""

from __future__ import annotations

from gateway.funasr.config import SessionConfig
from gateway.funasr.results import Partials
from gateway.session.utterance import utterance_for
from gateway.session.utterance.actions import (
    FinishStream,
    OpenStream,
    Pool,
    RelayResults,
    SendAudio,
)
from tests.helpers.utterance import SETTINGS, audio_of, loud, opened

CONFIG = SessionConfig(mode="online", chunk_size=(0, 1, 5), wav_name="w")  # 1920-byte chunks


def test_the_config_opens_one_streaming_pass_and_hands_it_to_the_writer() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    open_stream, relay = utterance.start()
    assert isinstance(open_stream, OpenStream)
    assert open_stream.stream.pool is Pool.STREAMING
    assert open_stream.options == CONFIG.stream_options()
    assert isinstance(relay, RelayResults)
    assert relay.streams == (open_stream.stream,)
    assert relay.last
    assert isinstance(relay.frames, Partials)
    assert relay.frames.mode == "online"
    assert relay.frames.final


def test_audio_goes_in_whole_chunks_whatever_the_framing() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    (stream,) = opened(utterance.start(), Pool.STREAMING)
    assert utterance.audio(bytes(1000)) == []
    assert utterance.audio(bytes(3000)) == [
        SendAudio(stream, bytes(1920)),
        SendAudio(stream, bytes(1920)),
    ]
    assert utterance.end() == [FinishStream(stream, bytes(160))]


def test_every_byte_goes_to_the_stream_once_and_in_order() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    (stream,) = opened(utterance.start(), Pool.STREAMING)
    pcm = loud(500)
    actions = [
        a for start in range(0, len(pcm), 999) for a in utterance.audio(pcm[start : start + 999])
    ]
    actions += utterance.end()
    assert audio_of(actions, stream) == pcm
    assert isinstance(actions[-1], FinishStream)


def test_a_changed_name_is_on_the_frames_from_then_on() -> None:
    utterance = utterance_for(CONFIG, SETTINGS, vad=False)
    (_, relay) = utterance.start()
    assert isinstance(relay, RelayResults)
    utterance.update(SessionConfig(mode="online", chunk_size=(0, 1, 5), wav_name="renamed"))
    assert relay.frames.label.wav_name == "renamed"


def test_audio_at_another_rate_is_resampled_per_utterance() -> None:
    config = SessionConfig(mode="online", chunk_size=(0, 1, 5), audio_fs=8000)
    utterance = utterance_for(config, SETTINGS, vad=False)
    (stream,) = opened(utterance.start(), Pool.STREAMING)
    actions = utterance.audio(bytes(8000)) + utterance.end()  # 0.5 s at 8 kHz
    assert len(audio_of(actions, stream)) == 16000  # 0.5 s at 16 kHz
