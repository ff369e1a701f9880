"""A realtime session's turn detection (sans I/O): OpenAI's realtime-only models get none
unless the client asks for it; semantic_vad and any count of milliseconds are taken, as
OpenAI takes them, and served as the nearest our energy endpointer does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.openai_api.realtime.config import (
    MAX_SILENCE_MS,
    MIN_SILENCE_MS,
    RealtimeSettings,
    TurnDetection,
    turn_detection_for,
)
from gateway.openai_api.realtime.events import SessionUpdate, parse_client_event
from gateway.openai_api.realtime.server_events import session_object


def ga(input_: dict[str, object]) -> str:
    session = {"type": "transcription", "audio": {"input": input_}}
    return json.dumps({"type": "session.update", "session": session})


def beta(session: dict[str, object]) -> str:
    return json.dumps({"type": "transcription_session.update", "session": session})


def applied(event: str, settings: RealtimeSettings | None = None) -> RealtimeSettings:
    update = parse_client_event(event, settings or RealtimeSettings())
    assert isinstance(update, SessionUpdate)
    return update.settings


def echoed(settings: RealtimeSettings) -> Any:
    shown: Any = session_object("sess_x", settings, "ga", 0)
    return shown["audio"]["input"]["turn_detection"]


@pytest.mark.parametrize(
    "model",
    ["gpt-realtime-whisper", "gpt-realtime-whisper-2026-05-14", "gpt-live-transcribe"],
)
def test_a_realtime_only_model_without_turn_detection_gets_none(model: str) -> None:
    """As LiveKit sends it for these models: no turn_detection key at all."""
    settings = applied(ga({"transcription": {"model": model, "language": "en"}}))
    assert settings.turn_detection is None
    assert echoed(settings) is None
    # The beta shape names the model in the same place.
    old = applied(beta({"input_audio_transcription": {"model": model}}))
    assert old.turn_detection is None


@pytest.mark.parametrize("model", ["gpt-4o-transcribe", "gpt-transcribe", "whisper-1", "checksum"])
def test_other_models_keep_server_vad(model: str) -> None:
    settings = applied(ga({"transcription": {"model": model}}))
    assert settings.turn_detection == TurnDetection()


def test_turn_detection_the_client_sets_wins_over_the_model() -> None:
    asked = {"type": "server_vad", "silence_duration_ms": 800}
    settings = applied(
        ga({"transcription": {"model": "gpt-realtime-whisper"}, "turn_detection": asked})
    )
    assert settings.turn_detection == TurnDetection(silence_duration_ms=800)
    # Set once, it stays through updates that leave it out, whatever model they name.
    later = applied(ga({"transcription": {"model": "gpt-live-transcribe"}}), settings)
    assert later.turn_detection == TurnDetection(silence_duration_ms=800)
    off = applied(ga({"turn_detection": None}))
    again = applied(ga({"transcription": {"model": "gpt-4o-transcribe"}}), off)
    assert again.turn_detection is None


def test_until_the_client_sets_it_turn_detection_follows_the_model_named() -> None:
    whisper = applied(ga({"transcription": {"model": "gpt-realtime-whisper"}}))
    back = applied(ga({"transcription": {"model": "gpt-4o-transcribe"}}), whisper)
    assert back.turn_detection == TurnDetection()
    # An update that names no model leaves it as it is.
    same = applied(ga({"transcription": {"language": "zh"}, "format": {"rate": 16000}}), whisper)
    assert same.turn_detection is None


def test_a_session_opened_on_a_realtime_only_url_model_starts_without_server_vad() -> None:
    """LiveKit puts ``?model=`` on the URL for a gateway; the dialect starts the session
    with ``turn_detection_for`` that name."""
    assert turn_detection_for("gpt-realtime-whisper") is None
    assert turn_detection_for("") == TurnDetection()
    assert turn_detection_for(None) == TurnDetection()
    start = RealtimeSettings(turn_detection=turn_detection_for("gpt-live-transcribe"))
    assert (
        applied(ga({"format": {"type": "audio/pcm", "rate": 24000}}), start).turn_detection is None
    )


@pytest.mark.parametrize("eagerness", ["low", "medium", "high", "auto"])
def test_semantic_vad_is_taken_and_served_as_server_vad_with_its_defaults(eagerness: str) -> None:
    settings = applied(ga({"turn_detection": {"type": "semantic_vad", "eagerness": eagerness}}))
    detection = settings.turn_detection
    assert detection is not None
    assert (detection.silence_duration_ms, detection.threshold) == (500, 0.5)
    assert echoed(settings) == {"type": "semantic_vad", "eagerness": eagerness}
    bare = applied(ga({"turn_detection": {"type": "semantic_vad"}}))
    assert echoed(bare) == {"type": "semantic_vad", "eagerness": "auto"}


@pytest.mark.parametrize(
    ("asked", "served"),
    [
        ({"silence_duration_ms": 0}, {"silence_duration_ms": MIN_SILENCE_MS}),
        ({"silence_duration_ms": 60_000}, {"silence_duration_ms": MAX_SILENCE_MS}),
        ({"prefix_padding_ms": 20_000}, {"prefix_padding_ms": MAX_SILENCE_MS}),
        (
            {"prefix_padding_ms": 600, "silence_duration_ms": 350, "threshold": 0.5},
            {"prefix_padding_ms": 600, "silence_duration_ms": 350},
        ),
    ],
    ids=["no-silence", "long-silence", "long-padding", "livekit"],
)
def test_milliseconds_are_served_as_the_nearest_the_endpointer_does(
    asked: dict[str, int], served: dict[str, int]
) -> None:
    settings = applied(ga({"turn_detection": {"type": "server_vad", **asked}}))
    shown = echoed(settings)
    assert {key: shown[key] for key in served} == served


def test_openais_unused_turn_detection_fields_are_taken() -> None:
    asked = {
        "type": "server_vad",
        "idle_timeout_ms": 5000,
        "create_response": False,
        "interrupt_response": False,
    }
    assert applied(ga({"turn_detection": asked})).turn_detection == TurnDetection()


def test_languages_delay_and_noise_strength_are_taken_unused() -> None:
    """What LiveKit sends for gpt-live-transcribe and Pipecat for gpt-realtime-whisper."""
    transcription = {
        "model": "gpt-live-transcribe",
        "languages": ["en", "zh"],
        "keywords": ["Acme Cloud", "退款"],
        "delay": "low",
    }
    settings = applied(
        ga(
            {
                "format": {"rate": 24000, "type": "audio/pcm"},
                "noise_reduction": {"type": "near_field", "strength": 0.5},
                "transcription": transcription,
            }
        )
    )
    assert settings.keywords == ("Acme Cloud", "退款")
    assert settings.hotwords == "Acme Cloud 退款"
    assert settings.noise_reduction == "near_field"
