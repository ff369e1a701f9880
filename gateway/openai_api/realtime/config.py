"""A realtime transcription session's configuration, and the updates that change it
(``session.update``, ``transcription_session.update``), validated (sans I/O).

Every field is checked against the shape OpenAI's API reference gives it (the ``openai``
SDK's types, ``openai/types/realtime``) and bounded, because what is kept lives as long as
the session and is sent back in every ``session.updated``: only what we understood is kept,
never the client's parsed JSON. What we accept and ignore, and what we refuse, is listed in
``docs/openai.md``.

What OpenAI takes is taken: a field we cannot use is ignored (a prompt's words that fit no
hotword, ``languages``, ``delay``, ``idle_timeout_ms``), a number we cannot serve exactly
is served as the nearest we can; only what OpenAI refuses too (a wrong type, a value
outside its enums or documented ranges) is an ``error`` event. An error event is fatal to
LiveKit's realtime STT and sends Pipecat's into a reconnect loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal, TypeGuard

from gateway.audio.g711 import Encoding
from gateway.audio.pcm import BYTES_PER_SECOND, MAX_AUDIO_FS, MIN_AUDIO_FS
from gateway.funasr.free_text import free_text_hotwords, hotwords_text

Dialect = Literal["ga", "beta"]
NoiseReduction = Literal["near_field", "far_field"]
TurnDetectionType = Literal["server_vad", "semantic_vad"]
Eagerness = Literal["low", "medium", "high", "auto"]

OPENAI_DEFAULT_RATE = 24000  # OpenAI's audio/pcm (and beta pcm16) rate
G711_RATE = 8000
# OpenAI's server_vad defaults.
DEFAULT_THRESHOLD = 0.5
DEFAULT_PREFIX_PADDING_MS = 300
DEFAULT_SILENCE_MS = 500
MIN_SILENCE_MS = 30  # the endpointer's frame
MAX_SILENCE_MS = 10_000
EAGERNESS: tuple[Eagerness, ...] = ("low", "medium", "high", "auto")
# OpenAI serves these models with no server VAD: they take no turn_detection, and their
# clients commit the buffer (LiveKit's OpenAI STT, Pipecat's). A session that names one
# and leaves turn_detection out gets none here too, else our 500 ms endpointer would cut
# a turn the client's own VAD (which waits longer) commits whole. Prefixes: dated
# snapshots are named after them.
REALTIME_ONLY_MODELS = ("gpt-realtime-whisper", "gpt-live-transcribe")
# Our energy endpointer's level for OpenAI's threshold: 0.5 is ASR_ENDPOINT_ENERGY_DBFS,
# and each 0.1 moves it 4 dB (0.0: 20 dB more sensitive, 1.0: 20 dB less).
DBFS_PER_THRESHOLD = 40.0
# OpenAI gives no lengths. Its model ids are short; ours (a pool's model, the default)
# may be a directory's path.
MAX_MODEL_CHARS = 256
MAX_LANGUAGE_CHARS = 35  # RFC 5646's advice for a language tag's buffer
# OpenAI's only ``include`` value for transcription sessions, and ours: each completed
# transcript's live speakers (docs/openai.md), where the model has a speaker model.
SPEAKERS_INCLUDE = "item.input_audio_transcription.speakers"
INCLUDE_VALUES = ("item.input_audio_transcription.logprobs", SPEAKERS_INCLUDE)
NOISE_REDUCTIONS: tuple[NoiseReduction, ...] = ("near_field", "far_field")

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
    """``server_vad``, carried out by our energy endpointer (``gateway.audio.endpointer``).
    ``semantic_vad`` is taken too (OpenAI's clients may send it, and an error event ends
    LiveKit's stream) and served the same way with server_vad's defaults: there is no turn
    model here; its ``eagerness`` is echoed, unused."""

    threshold: float = DEFAULT_THRESHOLD
    prefix_padding_ms: int = DEFAULT_PREFIX_PADDING_MS
    silence_duration_ms: int = DEFAULT_SILENCE_MS
    type: TurnDetectionType = "server_vad"
    eagerness: Eagerness = "auto"  # semantic_vad's

    def energy_dbfs(self, server_dbfs: float) -> float:
        return server_dbfs + (self.threshold - DEFAULT_THRESHOLD) * DBFS_PER_THRESHOLD


@dataclass(frozen=True, slots=True)
class RealtimeSettings:
    """A transcription session's configuration, as the last update left it."""

    encoding: Encoding = "pcm16"
    rate: int = OPENAI_DEFAULT_RATE
    model: str | None = None
    language: str | None = None
    prompt: str | None = None  # free text, mined for hotwords (``hotwords``)
    keywords: tuple[str, ...] = ()  # likewise
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    # Set by the client (else it follows the model the session names: turn_detection_for).
    turn_detection_chosen: bool = False
    noise_reduction: NoiseReduction | None = None  # echoed, not applied
    include: tuple[str, ...] = ()  # echoed; no logprobs are given

    @property
    def hotwords(self) -> str:
        """What FunASR's config takes as ``hotwords``: the words of the keywords and the
        prompt that fit a hotword (``gateway.funasr.free_text``), so the session's strict
        parser takes them as they are."""
        return hotwords_text(free_text_hotwords(self.prompt, self.keywords))

    @property
    def bytes_per_second(self) -> int:
        """The client's audio, as appends carry it: bytes a second of its format."""
        return self.rate * (2 if self.encoding == "pcm16" else 1)

    @property
    def sample_bytes(self) -> int:
        return 2 if self.encoding == "pcm16" else 1

    def max_append_bytes(self, max_frame_bytes: int) -> int:
        """The most audio one append may carry: as many seconds as ``max_frame_bytes`` of
        16 kHz PCM (ASR_MAX_FRAME_BYTES, the largest frame of a FunASR session), in this
        format, so that one event's decoding and resampling is bounded whatever the rate."""
        most = max_frame_bytes * self.bytes_per_second // BYTES_PER_SECOND
        return max(self.sample_bytes, most // self.sample_bytes * self.sample_bytes)


def turn_detection_for(model: str | None) -> TurnDetection | None:
    """A session's turn detection until its client sets one: none for a model OpenAI
    serves without it (``REALTIME_ONLY_MODELS``), else server_vad with OpenAI's defaults."""
    if model is not None and model.startswith(REALTIME_ONLY_MODELS):
        return None
    return TurnDetection()


def update_ga(session: dict[str, object], old: RealtimeSettings) -> RealtimeSettings:
    """``session.update``'s ``session`` applied to ``old``: only what it carries changes."""
    kind = session.get("type", "transcription")
    if kind != "transcription":
        raise RealtimeEventError(
            "invalid_value",
            "this server serves transcription sessions only: session.type must be"
            " 'transcription' (connect with ?intent=transcription)",
            param="session.type",
        )
    settings = old
    audio = as_object(session.get("audio", {}), "session.audio")
    input_ = as_object(audio.get("input", {}), "session.audio.input")
    if "format" in input_:
        settings = _format_ga(as_object(input_["format"], "session.audio.input.format"), settings)
    settings = _update_input(
        input_, settings, "session.audio.input", ("transcription", "noise_reduction")
    )
    return _update_include(session, settings)


def update_beta(session: dict[str, object], old: RealtimeSettings) -> RealtimeSettings:
    """``transcription_session.update``'s ``session`` applied to ``old``."""
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
        settings = replace(settings, turn_detection=turn, turn_detection_chosen=True)
    elif not settings.turn_detection_chosen and _names_model(fields.get(transcription)):
        # Left out, as LiveKit leaves it out for a realtime-only model: the model's own.
        settings = replace(settings, turn_detection=turn_detection_for(settings.model))
    if noise in fields:
        reduction = _noise_reduction(fields[noise], f"{where}.{noise}")
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


def _transcription(value: object, param: str, settings: RealtimeSettings) -> RealtimeSettings:
    fields = _object_or_none(value, param)
    if fields is None:
        return replace(settings, model=None, language=None, prompt=None, keywords=())
    model, language, prompt = settings.model, settings.language, settings.prompt
    if "model" in fields:
        model = _text_or_none(fields["model"], f"{param}.model", max_chars=MAX_MODEL_CHARS)
    if "language" in fields:
        where = f"{param}.language"
        language = _text_or_none(fields["language"], where, max_chars=MAX_LANGUAGE_CHARS)
    # The prompt is free text and the keywords terms, of any length or number OpenAI takes:
    # what fits a hotword is used, the rest ignored, nothing refused (an error event ends
    # LiveKit's stream). The event's own cap (ASR_MAX_TEXT_BYTES) bounds what is kept.
    # ``languages`` and ``delay`` are OpenAI's too: taken, unused, not echoed.
    if "prompt" in fields:
        prompt = _text_or_none(fields["prompt"], f"{param}.prompt")
    keywords = settings.keywords
    if "keywords" in fields:
        keywords = _keywords(fields["keywords"], f"{param}.keywords")
    return replace(settings, model=model, language=language, prompt=prompt, keywords=keywords)


def _keywords(value: object, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(word, str) for word in value):
        raise RealtimeEventError("invalid_type", "keywords must be a list of strings", param=param)
    return tuple(unicode_text(word, param) for word in value)


def _names_model(transcription: object) -> bool:
    return isinstance(transcription, dict) and "model" in transcription


def _turn_detection(value: object, param: str) -> TurnDetection | None:
    fields = _object_or_none(value, param)
    if fields is None:
        return None
    kind = fields.get("type", "server_vad")
    if kind == "semantic_vad":
        eagerness = fields.get("eagerness", "auto")
        for each in EAGERNESS:
            if eagerness == each:
                return TurnDetection(type="semantic_vad", eagerness=each)
        raise RealtimeEventError(
            "invalid_value",
            f"eagerness must be one of {', '.join(EAGERNESS)}",
            param=f"{param}.eagerness",
        )
    if kind != "server_vad":
        raise RealtimeEventError(
            "invalid_value",
            f"turn_detection.type {kind!r:.40} is not one of OpenAI's: 'server_vad',"
            " 'semantic_vad' (both served by our energy endpointer) or null",
            param=f"{param}.type",
        )
    threshold = fields.get("threshold", DEFAULT_THRESHOLD)
    if not isinstance(threshold, int | float) or isinstance(threshold, bool):
        threshold = math.nan
    if not 0.0 <= threshold <= 1.0:
        raise RealtimeEventError(
            "invalid_value", "threshold must be a number in 0..1", param=f"{param}.threshold"
        )
    # OpenAI documents no bounds for these: any count of milliseconds is taken, and served
    # (and echoed) as the nearest the endpointer does.
    padding = _milliseconds(fields, "prefix_padding_ms", DEFAULT_PREFIX_PADDING_MS, param)
    silence = _milliseconds(fields, "silence_duration_ms", DEFAULT_SILENCE_MS, param)
    return TurnDetection(
        float(threshold),
        min(padding, MAX_SILENCE_MS),
        min(max(silence, MIN_SILENCE_MS), MAX_SILENCE_MS),
    )


def _milliseconds(fields: dict[str, object], name: str, default: int, param: str) -> int:
    value = fields.get(name, default)
    if not _is_int(value) or value < 0:
        why = f"{name} must be a whole number of milliseconds"
        raise RealtimeEventError("invalid_value", why, param=f"{param}.{name}")
    return value


def _noise_reduction(value: object, param: str) -> NoiseReduction | None:
    """``{"type": "near_field" | "far_field"}`` or ``null``: its type is all that is kept."""
    fields = _object_or_none(value, param)
    if fields is None:
        return None
    kind = fields.get("type")
    for each in NOISE_REDUCTIONS:
        if kind == each:
            return each
    raise RealtimeEventError(
        "invalid_value",
        f"noise_reduction.type must be one of {', '.join(NOISE_REDUCTIONS)} (or"
        " noise_reduction null)",
        param=f"{param}.type",
    )


def _include(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise RealtimeEventError(
            "invalid_type", "include must be a list of strings", param="session.include"
        )
    unknown = next((item for item in value if item not in INCLUDE_VALUES), None)
    if unknown is not None:
        raise RealtimeEventError(
            "invalid_value",
            f"include: {unknown!r:.60} is not one of {', '.join(INCLUDE_VALUES)}",
            param="session.include",
        )
    return tuple(dict.fromkeys(value))


def as_object(value: object, param: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise RealtimeEventError("invalid_type", f"{param} must be an object", param=param)
    return value


def _object_or_none(value: object, param: str) -> dict[str, object] | None:
    return None if value is None else as_object(value, param)


def _text_or_none(value: object, param: str, *, max_chars: int | None = None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise RealtimeEventError("invalid_type", f"{param} must be a string", param=param)
    if max_chars is not None and len(value) > max_chars:
        raise RealtimeEventError(
            "invalid_value", f"{param} is at most {max_chars} characters", param=param
        )
    return unicode_text(value, param)


def unicode_text(value: str, param: str) -> str:
    """A string that can be sent back: JSON's ``"\\ud800"`` parses to a lone surrogate,
    which no UTF-8 text frame can carry."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RealtimeEventError(
            "invalid_value", f"{param} is not valid Unicode text", param=param
        ) from None
    return value


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
