"""OpenAI's Realtime API in transcription mode: its client events parsed, its server events
built (sans I/O).

Two dialects of the same session are spoken, as OpenAI's SDKs send them:

- ``ga`` (the SDK's ``client.realtime.connect``): ``session.update`` with
  ``{"type": "transcription", "audio": {"input": {"format", "transcription",
  "turn_detection", "noise_reduction"}}, "include"}``, answered by ``session.updated``;
- ``beta`` (the earlier transcription sessions): ``transcription_session.update`` with
  ``{"input_audio_format", "input_audio_transcription", "turn_detection",
  "input_audio_noise_reduction", "include"}``, answered by ``transcription_session.updated``.

A connection starts in ``ga`` (its ``session.created``) and answers in the dialect of the
last update it got. Fields follow OpenAI's event reference; what we accept and ignore, and
what we refuse, is listed in ``README.md`` ("OpenAI-compatible"). An update sets only the
fields it carries, as OpenAI's does; ``null`` turns turn detection off.

A client event that cannot be taken raises :class:`RealtimeEventError`, which becomes an
``error`` event; as in OpenAI's API the session stays open.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field, replace
from typing import Literal, TypeGuard

from gateway.protocol import parse_hotwords
from gateway.resample import MAX_AUDIO_FS, MIN_AUDIO_FS
from shared.errors import ProtocolError

Dialect = Literal["ga", "beta"]
Encoding = Literal["pcm16", "pcmu", "pcma"]

OPENAI_DEFAULT_RATE = 24000  # OpenAI's audio/pcm (and beta pcm16) rate
G711_RATE = 8000
# OpenAI's server_vad defaults.
DEFAULT_THRESHOLD = 0.5
DEFAULT_PREFIX_PADDING_MS = 300
DEFAULT_SILENCE_MS = 500
MAX_SILENCE_MS = 10_000
# Our energy endpointer's level for OpenAI's threshold: 0.5 is ASR_ENDPOINT_ENERGY_DBFS,
# and each 0.1 moves it 4 dB (0.0: 20 dB more sensitive, 1.0: 20 dB less).
DBFS_PER_THRESHOLD = 40.0

_FORMATS_GA: dict[str, Encoding] = {
    "audio/pcm": "pcm16",
    "audio/pcmu": "pcmu",
    "audio/pcma": "pcma",
}
_FORMATS_BETA: dict[str, Encoding] = {"pcm16": "pcm16", "g711_ulaw": "pcmu", "g711_alaw": "pcma"}


class RealtimeEventError(Exception):
    """A client event that cannot be taken: an ``error`` event with OpenAI's fields."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        event_id: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.event_id = event_id
        self.type = type_


@dataclass(frozen=True, slots=True)
class TurnDetection:
    """``server_vad``, carried out by our energy endpointer (``gateway.endpointer``)."""

    threshold: float = DEFAULT_THRESHOLD
    prefix_padding_ms: int = DEFAULT_PREFIX_PADDING_MS
    silence_duration_ms: int = DEFAULT_SILENCE_MS

    def energy_dbfs(self, server_dbfs: float) -> float:
        return server_dbfs + (self.threshold - DEFAULT_THRESHOLD) * DBFS_PER_THRESHOLD


@dataclass(frozen=True, slots=True)
class RealtimeSettings:
    """A transcription session's configuration, as the last update left it."""

    encoding: Encoding = "pcm16"
    rate: int = OPENAI_DEFAULT_RATE
    model: str | None = None
    language: str | None = None
    prompt: str | None = None  # to hotwords, for a model that takes them
    keywords: tuple[str, ...] = ()  # likewise
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    noise_reduction: dict[str, object] | None = None  # echoed, not applied
    include: tuple[str, ...] = ()  # echoed; no logprobs are given

    @property
    def hotwords(self) -> str:
        """What FunASR's config takes as ``hotwords``: the keywords and the prompt's words."""
        return " ".join([*self.keywords, *([self.prompt] if self.prompt else [])])


# -- client events -----------------------------------------------------------------------


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


def parse_client_event(text: str, settings: RealtimeSettings) -> ClientEvent:
    """One client event (a text frame); ``settings``: the session's, which an update changes."""
    try:
        fields = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise RealtimeEventError("invalid_json", "the event is not valid JSON") from None
    if not isinstance(fields, dict):
        raise RealtimeEventError("invalid_event", "an event is a JSON object")
    event_id = fields.get("event_id")
    event_id = event_id if isinstance(event_id, str) else None
    kind = fields.get("type")
    if not isinstance(kind, str):
        raise RealtimeEventError(
            "invalid_event", "the event has no 'type'", param="type", event_id=event_id
        )
    try:
        match kind:
            case "input_audio_buffer.append":
                return AudioAppended(_audio(fields, settings), event_id)
            case "input_audio_buffer.commit":
                return BufferCommitted(event_id)
            case "input_audio_buffer.clear":
                return BufferCleared(event_id)
            case "session.update":
                session = _object(fields.get("session"), "session")
                return SessionUpdate(_update_ga(session, settings), "ga", event_id)
            case "transcription_session.update":
                session = _object(fields.get("session"), "session")
                return SessionUpdate(_update_beta(session, settings), "beta", event_id)
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


def _audio(fields: dict[str, object], settings: RealtimeSettings) -> bytes:
    encoded = fields.get("audio")
    if not isinstance(encoded, str):
        raise RealtimeEventError("invalid_value", "'audio' must be a base64 string", param="audio")
    try:
        audio = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise RealtimeEventError(
            "invalid_value", "'audio' is not valid base64", param="audio"
        ) from None
    return audio


def _update_ga(session: dict[str, object], old: RealtimeSettings) -> RealtimeSettings:
    kind = session.get("type", "transcription")
    if kind != "transcription":
        raise RealtimeEventError(
            "invalid_value",
            "this server serves transcription sessions only: session.type must be"
            " 'transcription' (connect with ?intent=transcription)",
            param="session.type",
        )
    settings = old
    audio = _object(session.get("audio", {}), "session.audio")
    input_ = _object(audio.get("input", {}), "session.audio.input")
    if "format" in input_:
        settings = _format_ga(_object(input_["format"], "session.audio.input.format"), settings)
    settings = _update_input(
        input_, settings, "session.audio.input", ("transcription", "noise_reduction")
    )
    return _update_include(session, settings)


def _update_beta(session: dict[str, object], old: RealtimeSettings) -> RealtimeSettings:
    settings = old
    if "input_audio_format" in session:
        value = session["input_audio_format"]
        encoding = _FORMATS_BETA.get(value) if isinstance(value, str) else None
        if encoding is None:
            raise RealtimeEventError(
                "invalid_value",
                f"input_audio_format must be one of {', '.join(_FORMATS_BETA)}",
                param="session.input_audio_format",
            )
        rate = OPENAI_DEFAULT_RATE if encoding == "pcm16" else G711_RATE
        settings = replace(settings, encoding=encoding, rate=rate)
    keys = ("input_audio_transcription", "input_audio_noise_reduction")
    settings = _update_input(session, settings, "session", keys)
    return _update_include(session, settings)


def _update_input(
    fields: dict[str, object], settings: RealtimeSettings, where: str, keys: tuple[str, str]
) -> RealtimeSettings:
    """The fields both dialects have, under their names (``keys``: the transcription's and
    the noise reduction's) in the object at ``where``."""
    transcription, noise = keys
    if transcription in fields:
        settings = _transcription(fields[transcription], f"{where}.{transcription}", settings)
    if "turn_detection" in fields:
        turn = _turn_detection(fields["turn_detection"], f"{where}.turn_detection")
        settings = replace(settings, turn_detection=turn)
    if noise in fields:
        reduction = _object_or_none(fields[noise], f"{where}.{noise}")
        settings = replace(settings, noise_reduction=reduction)
    return settings


def _update_include(session: dict[str, object], settings: RealtimeSettings) -> RealtimeSettings:
    if "include" in session:
        settings = replace(settings, include=_include(session["include"]))
    return settings


def _format_ga(fields: dict[str, object], settings: RealtimeSettings) -> RealtimeSettings:
    kind = fields.get("type", "audio/pcm")
    encoding = _FORMATS_GA.get(kind) if isinstance(kind, str) else None
    if encoding is None:
        raise RealtimeEventError(
            "invalid_value",
            f"format.type must be one of {', '.join(_FORMATS_GA)}",
            param="session.audio.input.format.type",
        )
    if encoding != "pcm16":
        return replace(settings, encoding=encoding, rate=G711_RATE)
    rate = fields.get("rate", OPENAI_DEFAULT_RATE)
    # OpenAI takes 24000 only; any rate we can resample is taken (an extension).
    if not _is_int(rate) or not MIN_AUDIO_FS <= rate <= MAX_AUDIO_FS:
        raise RealtimeEventError(
            "invalid_value",
            f"format.rate must be an integer in {MIN_AUDIO_FS}..{MAX_AUDIO_FS}",
            param="session.audio.input.format.rate",
        )
    return replace(settings, encoding="pcm16", rate=rate)


def _transcription(value: object, where: str, settings: RealtimeSettings) -> RealtimeSettings:
    param = (
        f"{where}.transcription"
        if where.endswith("input")
        else f"{where}.input_audio_transcription"
    )
    fields = _object_or_none(value, param)
    if fields is None:
        return replace(settings, model=None, language=None, prompt=None, keywords=())
    texts: dict[str, str | None] = {}
    for name in ("model", "language", "prompt"):
        item = fields.get(name, getattr(settings, name))
        if item is not None and not isinstance(item, str):
            raise RealtimeEventError(
                "invalid_type", f"{name} must be a string", param=f"{param}.{name}"
            )
        texts[name] = item
    keywords = settings.keywords
    if "keywords" in fields:
        value = fields["keywords"]
        if not isinstance(value, list) or not all(isinstance(word, str) for word in value):
            raise RealtimeEventError(
                "invalid_type", "keywords must be a list of strings", param=f"{param}.keywords"
            )
        keywords = tuple(value)
    updated = replace(
        settings,
        model=texts["model"],
        language=texts["language"],
        prompt=texts["prompt"],
        keywords=keywords,
    )
    try:  # the limits of a FunASR config's hotwords, checked here: the session would close
        parse_hotwords(f"{param}.prompt", updated.hotwords)
    except ProtocolError as error:
        raise RealtimeEventError("invalid_value", error.message, param=f"{param}.prompt") from None
    return updated


def _turn_detection(value: object, param: str) -> TurnDetection | None:
    fields = _object_or_none(value, param)
    if fields is None:
        return None
    kind = fields.get("type", "server_vad")
    if kind != "server_vad":
        raise RealtimeEventError(
            "invalid_value",
            f"turn_detection.type {kind!r:.40} is not served: 'server_vad' (our energy"
            " endpointer) or null",
            param=f"{param}.type",
        )
    threshold = fields.get("threshold", DEFAULT_THRESHOLD)
    if not isinstance(threshold, int | float) or isinstance(threshold, bool):
        threshold = math.nan
    if not 0.0 <= threshold <= 1.0:
        raise RealtimeEventError(
            "invalid_value", "threshold must be a number in 0..1", param=f"{param}.threshold"
        )
    padding = fields.get("prefix_padding_ms", DEFAULT_PREFIX_PADDING_MS)
    if not _is_int(padding) or not 0 <= padding <= MAX_SILENCE_MS:
        raise RealtimeEventError(
            "invalid_value",
            f"prefix_padding_ms must be an integer in 0..{MAX_SILENCE_MS}",
            param=f"{param}.prefix_padding_ms",
        )
    silence = fields.get("silence_duration_ms", DEFAULT_SILENCE_MS)
    if not _is_int(silence) or not 30 <= silence <= MAX_SILENCE_MS:
        raise RealtimeEventError(
            "invalid_value",
            f"silence_duration_ms must be an integer in 30..{MAX_SILENCE_MS}",
            param=f"{param}.silence_duration_ms",
        )
    return TurnDetection(float(threshold), padding, silence)


def _include(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise RealtimeEventError(
            "invalid_type", "include must be a list of strings", param="session.include"
        )
    return tuple(value)


def _object(value: object, param: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise RealtimeEventError("invalid_type", f"{param} must be an object", param=param)
    return value


def _object_or_none(value: object, param: str) -> dict[str, object] | None:
    return None if value is None else _object(value, param)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


# -- server events -----------------------------------------------------------------------


def session_object(
    session_id: str, settings: RealtimeSettings, dialect: Dialect, expires_at: int
) -> dict[str, object]:
    """The session as ``session.created`` / ``session.updated`` (or the beta names) show it."""
    transcription = {
        "model": settings.model,
        "language": settings.language,
        "prompt": settings.prompt,
    }
    if settings.keywords:
        transcription["keywords"] = list(settings.keywords)  # type: ignore[assignment]
    turn: dict[str, object] | None = None
    if settings.turn_detection is not None:
        detection = settings.turn_detection
        turn = {
            "type": "server_vad",
            "threshold": detection.threshold,
            "prefix_padding_ms": detection.prefix_padding_ms,
            "silence_duration_ms": detection.silence_duration_ms,
        }
    if dialect == "beta":
        beta_format = {"pcm16": "pcm16", "pcmu": "g711_ulaw", "pcma": "g711_alaw"}
        return {
            "id": session_id,
            "object": "realtime.transcription_session",
            "expires_at": expires_at,
            "input_audio_format": beta_format[settings.encoding],
            "input_audio_transcription": transcription,
            "turn_detection": turn,
            "input_audio_noise_reduction": settings.noise_reduction,
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
                "noise_reduction": settings.noise_reduction,
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
