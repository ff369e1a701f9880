"""Every server event of OpenAI's Realtime API in transcription mode, built here and only
here (sans I/O): the session object of ``session.created`` / ``session.updated`` (or the
beta names), ``error``, the input buffer's (speech started and stopped, committed,
cleared), the conversation item's (added or created, done), and the transcription's
(delta, completed). Each builder returns the event without its ``event_id``, which the
connection numbers as it sends (``realtime.RealtimeDialect``), except ``error``, whose id
the caller gives."""

from __future__ import annotations

import json

from gateway.openai_api.errors import openai_error_body
from gateway.openai_api.realtime.config import Dialect, RealtimeEventError, RealtimeSettings

Event = dict[str, object]
COMPLETED = "conversation.item.input_audio_transcription.completed"
DELTA = "conversation.item.input_audio_transcription.delta"


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
    detection = settings.turn_detection
    if detection is not None and detection.type == "semantic_vad":
        turn = {"type": "semantic_vad", "eagerness": detection.eagerness}
    elif detection is not None:
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


def realtime_error_event(event_id: str, error: RealtimeEventError) -> Event:
    """``error``: OpenAI's error object, with the client event's id it answers."""
    body = openai_error_body(error.message, error.type, error.param, error.code)
    return {"event_id": event_id, "type": "error", "error": {**body, "event_id": error.event_id}}


def session_event(name: str, session: dict[str, object]) -> Event:
    return {"type": name, "session": session}


def speech_started(item_id: str, audio_start_ms: int) -> Event:
    return {
        "type": "input_audio_buffer.speech_started",
        "audio_start_ms": audio_start_ms,
        "item_id": item_id,
    }


def speech_stopped(item_id: str, audio_end_ms: int) -> Event:
    return {
        "type": "input_audio_buffer.speech_stopped",
        "audio_end_ms": audio_end_ms,
        "item_id": item_id,
    }


def committed(item_id: str, previous_item_id: str | None) -> Event:
    return {
        "type": "input_audio_buffer.committed",
        "previous_item_id": previous_item_id,
        "item_id": item_id,
    }


def cleared() -> Event:
    return {"type": "input_audio_buffer.cleared"}


def item_added(item_id: str, previous_item_id: str | None, dialect: Dialect) -> Event:
    """The committed buffer as an item: ``conversation.item.added`` (GA) or ``.created``."""
    name = "conversation.item.added" if dialect == "ga" else "conversation.item.created"
    return {"type": name, "previous_item_id": previous_item_id, "item": user_item(item_id, None)}


def item_done(item_id: str, transcript: str) -> Event:
    return {"type": "conversation.item.done", "item": user_item(item_id, transcript)}


def transcription_delta(item_id: str, delta: str) -> Event:
    return {"type": DELTA, "item_id": item_id, "content_index": 0, "delta": delta}


def transcription_completed(item_id: str, transcript: str, seconds: float) -> Event:
    return {
        "type": COMPLETED,
        "item_id": item_id,
        "content_index": 0,
        "transcript": transcript,
        "usage": {"type": "duration", "seconds": round(seconds, 3)},
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
