"""A session's limits, without a socket: the time is passed in."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gateway.limits import SessionLimits
from gateway.protocol import (
    AudioReceived,
    ConfigReceived,
    EndOfUtterance,
    ParserState,
    SessionConfig,
)
from gateway.settings import GatewaySettings
from shared.errors import ProtocolError

SETTINGS = replace(
    GatewaySettings(),
    idle_timeout_s=60.0,
    config_timeout_s=10.0,
    first_audio_timeout_s=30.0,
    max_frames_per_s=2.0,
    max_session_s=1.0,
)
CONFIG = ConfigReceived(SessionConfig())


def test_the_first_config_is_due_within_its_timeout_of_the_start() -> None:
    limits = SessionLimits(SETTINGS, now=100.0)
    deadline = limits.next_frame(ParserState.AWAITING_CONFIG, owed=False, now=105.0)
    assert deadline.at == 110.0
    assert "ASR_CONFIG_TIMEOUT" in deadline.why


def test_a_configs_first_audio_is_due_within_its_timeout() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(CONFIG, 16000, now=50.0)
    deadline = limits.next_frame(ParserState.STREAMING, owed=False, now=60.0)
    assert deadline.at == 80.0
    assert "ASR_FIRST_AUDIO_TIMEOUT" in deadline.why
    limits.event(AudioReceived(bytes(2)), 16000, now=61.0)
    deadline = limits.next_frame(ParserState.STREAMING, owed=False, now=62.0)
    assert deadline.at == 122.0
    assert "ASR_IDLE_TIMEOUT" in deadline.why


def test_an_empty_utterance_waits_for_no_audio() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(CONFIG, 16000, now=0.0)
    limits.event(EndOfUtterance(), 16000, now=1.0)
    assert limits.next_frame(ParserState.ENDED, owed=False, now=2.0).at == 62.0


def test_a_client_owed_a_result_may_wait_for_it_untimed() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    assert limits.next_frame(ParserState.ENDED, owed=True, now=2.0).at == math.inf


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
    limits = SessionLimits(SETTINGS, now=0.0)  # one second
    limits.event(AudioReceived(bytes(32000)), 16000, now=0.0)
    with pytest.raises(ProtocolError, match="ASR_MAX_SESSION_SECONDS"):
        limits.event(AudioReceived(bytes(2)), 16000, now=0.0)


def test_audio_at_8_khz_counts_as_its_16_khz_length() -> None:
    limits = SessionLimits(SETTINGS, now=0.0)
    limits.event(AudioReceived(bytes(16000)), 8000, now=0.0)  # one second at 8 kHz
    with pytest.raises(ProtocolError, match="ASR_MAX_SESSION_SECONDS"):
        limits.event(AudioReceived(bytes(2)), 8000, now=0.0)
