"""OpenAI's Realtime API in transcription mode: its client events parsed (sans I/O).

Two dialects of the same session are spoken, as OpenAI's SDKs send them:

- ``ga`` (the SDK's ``client.realtime.connect``): ``session.update`` with
  ``{"type": "transcription", "audio": {"input": {"format", "transcription",
  "turn_detection", "noise_reduction"}}, "include"}``, answered by ``session.updated``;
- ``beta`` (the earlier transcription sessions): ``transcription_session.update`` with
  ``{"input_audio_format", "input_audio_transcription", "turn_detection",
  "input_audio_noise_reduction", "include"}``, answered by ``transcription_session.updated``.

A connection starts in ``ga`` (its ``session.created``) and answers in the dialect of the
last update it got. Fields follow OpenAI's event reference; what we accept and ignore, and
what we refuse, is listed in ``docs/openai.md``. An update sets only the
fields it carries, as OpenAI's does; ``null`` turns turn detection off. The updates
themselves are ``realtime_config``'s; the events built from the session's configuration,
``realtime_server_events``'.

How large an event may be (:class:`EventLimits`): any event, ASR_MAX_TEXT_BYTES; an
append, more, but only in its audio, and that at most as many seconds as
ASR_MAX_FRAME_BYTES of 16 kHz PCM. An event over ASR_MAX_TEXT_BYTES is looked at before it
is parsed: too long for an append of the session's format, or with more than a handful
of JSON containers and values (``{``, ``[`` and ``,``, which the base64 alphabet never
has), it is refused unparsed, so that no client makes the parser build megabytes of
objects. Either raises :class:`FrameTooLargeError`: the session ends with 1009, as a
FunASR frame over its limit ends it.

A client event that cannot be taken otherwise raises :class:`RealtimeEventError`, which
becomes an ``error`` event; as in OpenAI's API the session stays open.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.openai_api.realtime.config import (
    Dialect,
    RealtimeEventError,
    RealtimeSettings,
    as_object,
    unicode_text,
    update_beta,
    update_ga,
)
from shared.errors import FrameTooLargeError
from shared.settings_table import MAX_FRAME_BYTES, MAX_TEXT_BYTES

APPEND = "input_audio_buffer.append"
# OpenAI gives no length; it is sent back in error events.
MAX_EVENT_ID_CHARS = 512
# ``{``, ``[`` and ``,`` in an event over ASR_MAX_TEXT_BYTES: an append's own are 1 and
# 2 (type, audio, event_id); this leaves room for a few more fields, not for a structure.
MAX_APPEND_STRUCTURE = 16


@dataclass(frozen=True, slots=True)
class EventLimits:
    """``max_text_bytes``: ASR_MAX_TEXT_BYTES, for any event; ``max_frame_bytes``:
    ASR_MAX_FRAME_BYTES, whose seconds of 16 kHz PCM are the most one append carries."""

    max_text_bytes: int = MAX_TEXT_BYTES.default
    max_frame_bytes: int = MAX_FRAME_BYTES.default

    def max_append_chars(self, settings: RealtimeSettings) -> int:
        """The longest append in ``settings``' format: its most audio, base64, and room
        for the rest."""
        return _base64_chars(settings.max_append_bytes(self.max_frame_bytes)) + self.max_text_bytes

    def append_seconds(self) -> float:
        return self.max_frame_bytes / BYTES_PER_SECOND


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    settings: RealtimeSettings
    dialect: Dialect
    event_id: str | None


@dataclass(frozen=True, slots=True)
class AudioAppended:
    audio: bytes  # as the session's format encodes it, decoded from base64
    event_id: str | None


@dataclass(frozen=True, slots=True)
class BufferCommitted:
    event_id: str | None


@dataclass(frozen=True, slots=True)
class BufferCleared:
    event_id: str | None


ClientEvent = SessionUpdate | AudioAppended | BufferCommitted | BufferCleared

# Events of OpenAI's Realtime API that a transcription session has no use for.
CONVERSATION_EVENTS = frozenset(
    {
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.truncate",
        "conversation.item.delete",
        "response.create",
        "response.cancel",
        "output_audio_buffer.clear",
    }
)


def parse_client_event(
    text: str, settings: RealtimeSettings, limits: EventLimits | None = None
) -> ClientEvent:
    """One client event (a text frame); ``settings``: the session's, which an update
    changes, and whose format says how much audio an append may carry."""
    limits = limits or EventLimits()
    large = _utf8_over(text, limits.max_text_bytes)
    if large:
        _check_large(text, settings, limits)
    try:
        fields = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise RealtimeEventError("invalid_json", "the event is not valid JSON") from None
    if not isinstance(fields, dict):
        raise RealtimeEventError("invalid_event", "an event is a JSON object")
    kind = fields.get("type")
    if large and kind != APPEND:
        raise FrameTooLargeError(_not_an_append(limits))
    event_id = _event_id(fields.get("event_id"))
    if not isinstance(kind, str):
        raise RealtimeEventError(
            "invalid_event", "the event has no 'type'", param="type", event_id=event_id
        )
    try:
        match kind:
            case "input_audio_buffer.append":
                return AudioAppended(_audio(fields, settings, limits), event_id)
            case "input_audio_buffer.commit":
                return BufferCommitted(event_id)
            case "input_audio_buffer.clear":
                return BufferCleared(event_id)
            case "session.update":
                session = as_object(fields.get("session"), "session")
                return SessionUpdate(update_ga(session, settings), "ga", event_id)
            case "transcription_session.update":
                session = as_object(fields.get("session"), "session")
                return SessionUpdate(update_beta(session, settings), "beta", event_id)
            case _ if kind in CONVERSATION_EVENTS:
                raise RealtimeEventError(
                    "unsupported_event",
                    f"{kind} is not part of a transcription session",
                    param="type",
                )
            case _:
                raise RealtimeEventError(
                    "invalid_event", f"unknown event type {kind[:60]!r}", param="type"
                )
    except RealtimeEventError as error:
        error.event_id = event_id
        raise


def _check_large(text: str, settings: RealtimeSettings, limits: EventLimits) -> None:
    """An event over ASR_MAX_TEXT_BYTES, before it is parsed: it can only be an append."""
    most = limits.max_append_chars(settings)
    if len(text) > most:
        raise FrameTooLargeError(
            f"an event over {limits.max_text_bytes} bytes (ASR_MAX_TEXT_BYTES) must be an"
            f" {APPEND} of at most {limits.append_seconds():g} s of audio (ASR_MAX_FRAME_BYTES"
            f" of 16 kHz PCM): {most} characters here"
        )
    if text.count("{") + text.count("[") + text.count(",") > MAX_APPEND_STRUCTURE:
        raise FrameTooLargeError(_not_an_append(limits))


def _not_an_append(limits: EventLimits) -> str:
    return (
        f"an event over {limits.max_text_bytes} bytes (ASR_MAX_TEXT_BYTES) must be an"
        f" {APPEND}, large in its audio only"
    )


def _audio(fields: dict[str, object], settings: RealtimeSettings, limits: EventLimits) -> bytes:
    encoded = fields.get("audio")
    if not isinstance(encoded, str):
        raise RealtimeEventError("invalid_value", "'audio' must be a base64 string", param="audio")
    most = settings.max_append_bytes(limits.max_frame_bytes)
    if len(encoded) > _base64_chars(most):
        raise FrameTooLargeError(_too_much_audio(most, limits))
    try:
        audio = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise RealtimeEventError(
            "invalid_value", "'audio' is not valid base64", param="audio"
        ) from None
    if len(audio) > most:
        raise FrameTooLargeError(_too_much_audio(most, limits))
    return audio


def _too_much_audio(most: int, limits: EventLimits) -> str:
    return (
        f"an append carries at most {limits.append_seconds():g} s of audio"
        f" (ASR_MAX_FRAME_BYTES of 16 kHz PCM): {most} bytes in the session's format"
    )


def _event_id(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    if len(value) > MAX_EVENT_ID_CHARS:
        raise RealtimeEventError(
            "invalid_value",
            f"event_id is at most {MAX_EVENT_ID_CHARS} characters",
            param="event_id",
        )
    return unicode_text(value, "event_id")


def _base64_chars(size: int) -> int:
    return 4 * -(-size // 3)


def _utf8_over(text: str, limit: int) -> bool:
    # Every UTF-8 character is 1 to 4 bytes: most events are settled without encoding.
    return len(text) > limit or (
        len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit
    )


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")
