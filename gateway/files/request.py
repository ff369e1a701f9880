"""``POST /v1/transcribe``: a whole file in, its text out.

The audio comes as a multipart upload (field ``file``) or as JSON ``{"url": "..."}``
fetched with ``httpx`` (``gateway.files.fetch``); ``hotwords`` (a form field, or a JSON key)
takes either form FunASR's clients send, as in a WebSocket config; so does ``itn``
(default true, as a config's), ``language`` is the language spoken, for a model that takes
one (SenseVoiceSmall: ``SPOKEN_LANGUAGES``, default ``auto``), ``speakers`` (or ``spk``, as
funasr-server spells it; default false) asks for each sentence's speaker, and ``model``
names a served model. Bodies are read with a
byte cap as they arrive (``gateway.files.multipart``): nothing is spooled to disk, memory is
bounded by the cap.
It must be WAV (PCM 8/16/24/32-bit, float, u-law or A-law; 8,000 to 48,000 Hz; at most
``MAX_CHANNELS`` channels: ``gateway.audio.wav``); its header is checked (rate, channels,
duration) before any sample is read; it is mixed to mono and resampled to 16 kHz (``soxr``)
off the event loop, then decoded as one utterance by the pool. Every refusal is an HTTP
status with a JSON ``error`` and is counted in ``asr_transcription_refusals_total{reason}``:

====== ==================== ==========================================================
status reason               when
====== ==================== ==========================================================
400    bad_length           a request ``Content-Length`` that is not a number
400    bad_form             a malformed form, no ``file`` part, two, over ``MAX_PARTS``
                            parts, a text field over ``FIELD_MAX_BYTES``
400    bad_json             not JSON, or not ``{"url": "..."}``
400    bad_model            a JSON ``model`` that is not a string
400    bad_url              a URL that is not http(s), or malformed
400    bad_hotwords         hotwords past the limits of a WebSocket config
400    bad_itn              an ``itn`` that is not true or false
400    bad_language         a ``language`` that is not one of ``SPOKEN_LANGUAGES``
400    bad_speakers         a ``speakers`` (``spk``) that is not true or false
400    no_speaker_model     ``speakers`` asked of a model with no speaker model
                            (``ASR_SPEAKER_MODEL``)
400    bad_wav              an empty, truncated or corrupt WAV, one without samples
400    bad_rate             a sample rate outside 8,000 to 48,000 Hz
400    too_many_channels    more than ``MAX_CHANNELS`` channels
400    private_address      a URL host (any redirect hop) resolving to an address that
                            is not global (unless ``ASR_FETCH_ALLOW_PRIVATE``)
400    fetch_failed         the fetch failed: not resolved, refused, reset, a protocol
                            error, a malformed ``Content-Length``, not HTTP 200, over
                            ``REDIRECTS`` redirects
400    fetch_timeout        the fetch took over ``ASR_FETCH_TIMEOUT``
400    disconnected         the client went away while sending the body
401    unauthorized         no API key, or a wrong one (as for WebSocket sessions)
403    forbidden_origin     an ``Origin`` not in ``ASR_ALLOWED_ORIGINS``
404    unknown_model        a ``model`` that is not served (``GET /v1/models`` lists them)
408    upload_timeout       the body did not arrive within ``ASR_UPLOAD_TIMEOUT``
413    too_large            a file or fetch over ``ASR_TRANSCRIBE_MAX_BYTES``, a form over
                            that and ``FORM_SLACK_BYTES``, JSON over 64 KiB (a declared
                            ``Content-Length`` over the cap: at once, nothing read)
413    too_long             more than ``ASR_MAX_SESSION_SECONDS`` of audio (from the header)
415    unsupported_type     a request that is neither multipart nor JSON
415    not_wav              audio that is not WAV, or a WAV encoding not listed above
429    busy                 ``ASR_TRANSCRIBE_CONCURRENCY`` requests running (``Retry-After``)
499    client_gone          the client closed the connection after its body, before the
                            answer: the work is cancelled then (``gateway.files.disconnect``)
503    unavailable          the server is draining, no worker is ready, or no descriptor is
                            free for a URL fetch (``Retry-After``)
500    decode_failed        the pool failed to decode
500    internal             any other exception: one log line
====== ==================== ==========================================================
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import anyio
import numpy as np
import numpy.typing as npt
from starlette.requests import ClientDisconnect, Request

from gateway.audio import wav
from gateway.files.errors import TranscribeError
from gateway.files.fetch import fetch
from gateway.files.multipart import (
    FORM_WHY,
    JSON_MAX_BYTES,
    JSON_WHY,
    MAX_PARTS,
    TEXT_FIELDS,
    FieldCap,
    Form,
    check_declared_length,
    field_reason,
    form_limit,
    paced,
    read_capped,
    read_form,
)
from gateway.funasr.hotwords import parse_hotwords
from gateway.settings import TranscribeSettings
from shared.errors import GatewayError, OverCapacityError, ProtocolError, ShuttingDownError
from shared.messages import SAMPLE_RATE, SPOKEN_LANGUAGES

__all__ = [
    "AudioRequest",
    "TranscribeError",
    "decode_wav",
    "duration_s",
    "parse_hotwords_field",
    "parse_itn_field",
    "parse_language_field",
    "parse_speakers_field",
    "read_audio",
    "read_upload",
    "refusal_for",
]

# The status of each refusal of ``gateway.audio.wav.decode_wav``'s, by its reason (else 400).
_WAV_STATUS = {"not_wav": 415, "too_long": 413}


# -- decoding -----------------------------------------------------------------------------


def decode_wav(data: bytes, max_seconds: float) -> npt.NDArray[np.int16]:
    """WAV bytes -> 16 kHz mono int16 (``gateway.audio.wav.decode_wav``, its header checked
    before any sample is read), each refusal an HTTP one. Blocking: call it in a thread."""
    try:
        return wav.decode_wav(data, max_seconds)
    except wav.WavError as error:
        status = _WAV_STATUS.get(error.reason, 400)
        raise TranscribeError(status, error.reason, error.message) from None


# -- the request ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AudioRequest:
    data: bytes
    source: str  # the file name or the URL
    hotwords: tuple[str, ...] = ()
    model: str | None = None  # a served model's name (None: the default)
    itn: bool = True  # inverse text normalization of the text, as a FunASR config's
    language: str = "auto"  # the language spoken (SenseVoice; other models ignore it)
    speakers: bool = False  # each sentence's speaker (CAM++), and the speaker turns


def parse_hotwords_field(value: object, name: str = "hotwords") -> tuple[str, ...]:
    """Hotwords in either form FunASR's clients send; past the limits of a WebSocket config,
    a 400 whose reason is ``bad_<name>`` (``bad_hotwords``)."""
    if value is None:
        return ()
    try:
        return parse_hotwords(name, value)
    except ProtocolError as error:
        raise TranscribeError(400, field_reason(name), error.message) from None


def parse_itn_field(value: str | None) -> bool:
    """A form's ``itn``: ``true`` or ``false`` (any case; unset: true, a FunASR config's
    default), else a 400 ``bad_itn``."""
    text = (value or "true").strip().lower()
    if text not in ("true", "false"):
        raise TranscribeError(400, "bad_itn", f"itn {value!r:.40} is not true or false")
    return text == "true"


def parse_speakers_field(speakers: object, spk: object) -> bool:
    """``speakers``, or funasr-server's ``spk``: a bool (JSON) or ``true``/``false`` (a form;
    any case); unset: false; else a 400 ``bad_speakers``."""
    value = speakers if speakers is not None else spk
    if value is None or isinstance(value, bool):
        return bool(value)
    text = value.strip().lower() if isinstance(value, str) else None
    if text not in ("true", "false"):
        raise TranscribeError(400, "bad_speakers", f"speakers {value!r:.40} is not true or false")
    return text == "true"


def parse_language_field(value: object) -> str:
    """A ``language``: one of ``SPOKEN_LANGUAGES`` (unset: ``auto``), else a 400."""
    if value is None:
        return "auto"
    if value not in SPOKEN_LANGUAGES:
        languages = ", ".join(SPOKEN_LANGUAGES)
        raise TranscribeError(
            400, "bad_language", f"language {value!r:.40} is not one of {languages}"
        )
    return str(value)


async def read_audio(request: Request, settings: TranscribeSettings) -> AudioRequest:
    """The audio bytes of a request, where they came from, and its hotwords."""
    with _disconnect_refused():
        return await _read_audio(request, settings)


async def read_upload(
    request: Request,
    settings: TranscribeSettings,
    fields: Collection[str] = TEXT_FIELDS,
    max_parts: int = MAX_PARTS,
    caps: Mapping[str, FieldCap] | None = None,
) -> Form:
    """A ``multipart/form-data`` request's ``file`` and its text ``fields`` (OpenAI's
    endpoint, which takes no JSON), and its capped fields (``FieldCap``): the same caps,
    deadline and refusals as an upload to ``/v1/transcribe``."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise TranscribeError(
            415, "unsupported_type", "send multipart/form-data with a 'file' field"
        )
    with _disconnect_refused():
        return await _read_upload(request, content_type, settings, fields, max_parts, caps)


@contextmanager
def _disconnect_refused() -> Iterator[None]:
    try:
        yield
    except ClientDisconnect:
        raise TranscribeError(
            400, "disconnected", "the client went away while sending the body"
        ) from None


async def _read_upload(
    request: Request,
    content_type: str,
    settings: TranscribeSettings,
    fields: Collection[str] = TEXT_FIELDS,
    max_parts: int = MAX_PARTS,
    caps: Mapping[str, FieldCap] | None = None,
) -> Form:
    limit = form_limit(settings.max_bytes, caps)
    check_declared_length(request.headers, limit, "the form", FORM_WHY)
    with _upload_deadline(settings):
        body = paced(request.stream(), settings.upload_min_bytes_per_s)
        form = await read_form(content_type, body, settings.max_bytes, fields, max_parts, caps)
    if form.file is None:
        raise TranscribeError(400, "bad_form", "the multipart request has no 'file' field")
    return form


async def _read_audio(request: Request, settings: TranscribeSettings) -> AudioRequest:
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await _read_upload(request, content_type, settings)
        assert form.file is not None, "_read_upload refuses a form without one"
        hotwords = parse_hotwords_field(form.hotwords)
        itn = parse_itn_field(form.text("itn"))
        language = parse_language_field(form.text("language"))
        speakers = parse_speakers_field(form.text("speakers"), form.text("spk"))
        model = form.text("model")
        return AudioRequest(form.file, form.filename, hotwords, model, itn, language, speakers)
    if content_type.startswith("application/json"):
        check_declared_length(request.headers, JSON_MAX_BYTES, "the JSON body", JSON_WHY)
        with _upload_deadline(settings):
            body = paced(request.stream(), settings.upload_min_bytes_per_s)
            raw = await read_capped(body, JSON_MAX_BYTES, "the JSON body", JSON_WHY)
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):
            raise TranscribeError(400, "bad_json", "the body is not valid JSON") from None
        url = payload.get("url") if isinstance(payload, dict) else None
        if not isinstance(url, str):
            raise TranscribeError(400, "bad_json", 'the JSON body must be {"url": "http(s)://..."}')
        words = parse_hotwords_field(payload.get("hotwords"))
        model = payload.get("model")
        if model is not None and not isinstance(model, str):
            raise TranscribeError(400, "bad_model", "model must be a served model's name")
        itn = payload.get("itn", True)
        if not isinstance(itn, bool):
            raise TranscribeError(400, "bad_itn", "itn must be true or false")
        language = parse_language_field(payload.get("language"))
        speakers = parse_speakers_field(payload.get("speakers"), payload.get("spk"))
        data = await fetch(
            url,
            max_bytes=settings.max_bytes,
            timeout_s=settings.fetch_timeout_s,
            allow_private=settings.fetch_allow_private,
        )
        return AudioRequest(data, url, words, model, itn, language, speakers)
    raise TranscribeError(
        415,
        "unsupported_type",
        "send multipart/form-data with a 'file' field, or application/json with a 'url'",
    )


@contextmanager
def _upload_deadline(settings: TranscribeSettings) -> Iterator[None]:
    """408 unless the body has arrived within ``ASR_UPLOAD_TIMEOUT``."""
    with anyio.move_on_after(settings.upload_timeout_s) as scope:
        yield
    if scope.cancelled_caught:
        raise TranscribeError(
            408,
            "upload_timeout",
            f"the body did not arrive within {settings.upload_timeout_s:g} s (ASR_UPLOAD_TIMEOUT)",
        )


def refusal_for(error: GatewayError) -> TranscribeError:
    if isinstance(error, ShuttingDownError | OverCapacityError):
        return TranscribeError(503, "unavailable", error.message)
    return TranscribeError(500, "decode_failed", f"decoding failed: {error.message}")


def duration_s(samples: npt.NDArray[np.int16]) -> float:
    return math.floor(len(samples) / SAMPLE_RATE * 1000) / 1000
