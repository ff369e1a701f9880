"""A session's limits, without a socket: the time is passed in."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gateway.funasr.config import SessionConfig
from gateway.funasr.known_speakers import ReferenceClip
from gateway.funasr.parser import AudioReceived, ConfigReceived, EndOfUtterance, ParserState
from gateway.limits.session_limits import MAX_EMPTY_UTTERANCES, SessionLimits
from gateway.settings import GatewaySettings
from shared.errors import ProtocolError

SETTINGS = replace(
    GatewaySettings(),
    idle_timeout_s=60.0,
    config_timeout_s=10.0,
    first_audio_timeout_s=30.0,
    max_frames_per_s=2.0,
    max_session_s=10.0,
)
CONFIG = ConfigReceived(SessionConfig())


def test_the_first_config_is_due_within_its_timeout_of_the_start() -> None:
    limits = SessionLimits(SETTINGS, now=100.0)
    deadline = limits.next_frame(ParserState.AWAITING_CONFIG, owed=False)
    assert deadline.at == 110.0
    assert "ASR_CONFIG_TIMEOUT" in deadline.why


def test_a_configs_first_audio_is_due_within_its_timeout() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(CONFIG, 16000, now=20.0)
    deadline = limits.next_frame(ParserState.STREAMING, owed=False)
    assert deadline.at == 50.0
    assert "ASR_FIRST_AUDIO_TIMEOUT" in deadline.why
    limits.event(AudioReceived(bytes(640)), 16000, now=41.0)
    deadline = limits.next_frame(ParserState.STREAMING, owed=False)
    assert deadline.at == 101.0
    assert "ASR_IDLE_TIMEOUT" in deadline.why


def test_a_config_never_puts_the_idle_deadline_off() -> None:
    """The first audio is due by the idle deadline if that comes first: a config (or an
    end, an update) costs nothing to send, and sent every minute it held a place for ever."""
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(CONFIG, 16000, now=50.0)
    assert limits.next_frame(ParserState.STREAMING, owed=False).at == 60.0
    limits.event(EndOfUtterance(), 16000, now=51.0)
    assert limits.next_frame(ParserState.ENDED, owed=False).at == 60.0


def test_only_20_ms_of_audio_puts_the_idle_deadline_off() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(CONFIG, 16000, now=0.0)
    limits.event(AudioReceived(bytes(2)), 16000, now=30.0)  # one sample
    assert limits.next_frame(ParserState.STREAMING, owed=False).at == 60.0
    limits.event(AudioReceived(bytes(638)), 16000, now=40.0)  # 20 ms in all
    assert limits.next_frame(ParserState.STREAMING, owed=False).at == 100.0
    limits.event(AudioReceived(bytes(320)), 8000, now=50.0)  # 20 ms at 8 kHz
    assert limits.next_frame(ParserState.STREAMING, owed=False).at == 110.0


def test_the_result_a_client_waited_for_puts_the_idle_deadline_off() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(CONFIG, 16000, now=0.0)
    limits.event(AudioReceived(bytes(640)), 16000, now=1.0)
    limits.event(EndOfUtterance(), 16000, now=1.0)
    limits.results_sent(now=70.0)  # a long decode
    assert limits.next_frame(ParserState.ENDED, owed=False).at == 130.0


def test_the_results_of_an_empty_utterance_do_not_put_the_idle_deadline_off() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(CONFIG, 16000, now=50.0)
    limits.event(EndOfUtterance(), 16000, now=50.0)
    limits.results_sent(now=51.0)
    assert limits.next_frame(ParserState.ENDED, owed=False).at == 60.0


def test_an_empty_utterance_waits_for_no_audio() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(CONFIG, 16000, now=0.0)
    limits.event(EndOfUtterance(), 16000, now=1.0)
    assert limits.next_frame(ParserState.ENDED, owed=False).at == 60.0


def test_empty_utterances_are_bounded() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    for _ in range(MAX_EMPTY_UTTERANCES):
        limits.event(CONFIG, 16000, now=0.0)
        limits.event(AudioReceived(bytes(638)), 16000, now=0.0)  # under 20 ms: empty
        limits.event(EndOfUtterance(), 16000, now=0.0)
    limits.event(CONFIG, 16000, now=0.0)
    limits.event(AudioReceived(bytes(640)), 16000, now=0.0)  # 20 ms: not empty
    limits.event(EndOfUtterance(), 16000, now=0.0)
    limits.event(CONFIG, 16000, now=0.0)
    with pytest.raises(ProtocolError, match="utterances ended with no audio"):
        limits.event(EndOfUtterance(), 16000, now=0.0)


def test_a_client_owed_a_result_may_wait_for_it_untimed() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    assert limits.next_frame(ParserState.ENDED, owed=True).at == math.inf


def test_frames_are_counted_by_how_little_audio_they_carry() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)  # two a second
    limits.frame(None, 16000, now=0.0)
    limits.frame(2, 16000, now=0.0)
    for _ in range(100):
        limits.frame(640, 16000, now=0.0)  # 20 ms of audio: free
    with pytest.raises(ProtocolError, match="ASR_MAX_FRAMES_PER_SECOND"):
        limits.frame(160, 8000, now=0.0)  # 10 ms of audio: half a token
    limits.frame(None, 16000, now=0.5)  # a token back after half a second


def test_a_frame_at_8_khz_is_counted_as_its_16_khz_audio() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    for _ in range(10):
        limits.frame(320, 8000, now=0.0)  # 20 ms of audio at 8 kHz


def test_the_sessions_audio_is_bounded() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)  # ten seconds
    limits.event(AudioReceived(bytes(320_000)), 16000, now=0.0)
    with pytest.raises(ProtocolError, match="ASR_MAX_SESSION_SECONDS"):
        limits.event(AudioReceived(bytes(2)), 16000, now=0.0)


def test_audio_at_8_khz_counts_as_its_16_khz_length() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(AudioReceived(bytes(160_000)), 8000, now=0.0)  # ten seconds at 8 kHz
    with pytest.raises(ProtocolError, match="ASR_MAX_SESSION_SECONDS"):
        limits.event(AudioReceived(bytes(2)), 8000, now=0.0)


def test_an_offline_spk_configs_reference_clips_count_as_the_sessions_audio() -> None:
    clips = (ReferenceClip(b"RIFF", 4.0), ReferenceClip(b"RIFF", 3.0))
    config = SessionConfig(mode="offline", spk=True, spk_names=("a", "b"), spk_refs=clips)
    limits = SessionLimits(SETTINGS, now=0.0)  # ten seconds
    limits.event(ConfigReceived(config), 16000, now=0.0)  # seven of them, before any audio
    limits.event(AudioReceived(bytes(96_000)), 16000, now=0.0)  # three more
    with pytest.raises(ProtocolError, match=r"references \(7.0 s\) are more than 10 s"):
        limits.event(ConfigReceived(config), 16000, now=0.0)  # the next utterance's


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(SessionConfig(mode="offline"), id="no-spk"),
        pytest.param(SessionConfig(mode="2pass", spk=True), id="2pass"),
    ],
)
def test_reference_clips_an_utterance_does_not_embed_cost_nothing(config: SessionConfig) -> None:
    clips = (ReferenceClip(b"RIFF", 10.0),)
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(ConfigReceived(replace(config, spk_names=("a",), spk_refs=clips)), 16000, 0.0)
    limits.event(AudioReceived(bytes(320_000)), 16000, now=0.0)  # the whole ten seconds
