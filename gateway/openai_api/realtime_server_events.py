"""The server events of OpenAI's Realtime API in transcription mode that are built from the
session's configuration and ids, not from its results (sans I/O): the session object of
``session.created`` / ``session.updated`` (or the beta names), ``error``, and the user item
of a committed buffer."""

from __future__ import annotations

import json

from gateway.openai_api.realtime_config import Dialect, RealtimeEventError, RealtimeSettings


def session_object(
    session_id: str, settings: RealtimeSettings, dialect: Dialect, expires_at: int
) -> dict[str, object]:
    """The session as ``session.created`` / ``session.updated`` (or the beta names) show it."""
    transcription: dict[str, object] = {
        "model": settings.model,
        "language": settings.language,
        "prompt": settings.prompt,
    }
    if settings.keywords:
        transcription["keywords"] = list(settings.keywords)
    turn: dict[str, object] | None = None
    if settings.turn_detection is not None:
        detection = settings.turn_detection
        turn = {
            "type": "server_vad",
            "threshold": detection.threshold,
            "prefix_padding_ms": detection.prefix_padding_ms,
            "silence_duration_ms": detection.silence_duration_ms,
        }
    noise = None if settings.noise_reduction is None else {"type": settings.noise_reduction}
    if dialect == "beta":
        beta_format = {"pcm16": "pcm16", "pcmu": "g711_ulaw", "pcma": "g711_alaw"}
        return {
            "id": session_id,
            "object": "realtime.transcription_session",
            "expires_at": expires_at,
            "input_audio_format": beta_format[settings.encoding],
            "input_audio_transcription": transcription,
            "turn_detection": turn,
            "input_audio_noise_reduction": noise,
            "include": list(settings.include),
        }
    audio_format: dict[str, object] = {"type": "audio/pcm", "rate": settings.rate}
    if settings.encoding != "pcm16":
        audio_format = {"type": f"audio/{settings.encoding}"}
    return {
        "type": "transcription",
        "object": "realtime.transcription_session",
        "id": session_id,
        "expires_at": expires_at,
        "audio": {
            "input": {
                "format": audio_format,
                "transcription": transcription,
                "turn_detection": turn,
                "noise_reduction": noise,
            }
        },
        "include": list(settings.include),
    }


class EventIds:
    """Server event and item ids of one connection: ``event_<session>_<n>``."""

    def __init__(self, session_id: str) -> None:
        self._stem = session_id.removeprefix("sess_")
        self._events = 0
        self._items = 0

    def event(self) -> str:
        self._events += 1
        return f"event_{self._stem}_{self._events}"

    def item(self) -> str:
        self._items += 1
        return f"item_{self._stem}_{self._items}"


def error_event(event_id: str, error: RealtimeEventError) -> dict[str, object]:
    return {
        "event_id": event_id,
        "type": "error",
        "error": {
            "type": error.type,
            "code": error.code,
            "message": error.message,
            "param": error.param,
            "event_id": error.event_id,
        },
    }


def user_item(item_id: str, transcript: str | None) -> dict[str, object]:
    """A committed buffer as a conversation item: a user message of input audio."""
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "status": "completed",
        "role": "user",
        "content": [{"type": "input_audio", "transcript": transcript}],
    }


def encode(event: dict[str, object]) -> str:
    return json.dumps(event, ensure_ascii=False, allow_nan=False)
