"""``POST /v1/transcribe``: a whole file in, its text out.

The audio comes as a multipart upload (field ``file``) or as JSON ``{"url": "..."}``
fetched with ``httpx``; ``hotwords`` (a form field, or a JSON key) takes either form
FunASR's clients send, as in a WebSocket config. It must be WAV (any rate, any channel
count, 16/24/32-bit or float); it is mixed to mono and resampled to 16 kHz (``soxr``) off
the event loop, then decoded as one utterance by the pool. Every refusal is an HTTP
status with a JSON ``error``:

- 400: no file, an empty or truncated WAV, a URL that is not http(s), a URL whose host
  resolves to a private, loopback or link-local address (unless ``ASR_FETCH_ALLOW_PRIVATE``),
  a fetch that failed;
- 401/403: access control, as for WebSocket sessions;
- 413: more than ``ASR_TRANSCRIBE_MAX_BYTES`` or ``ASR_MAX_SESSION_SECONDS`` of audio;
- 415: a request that is neither multipart nor JSON, or audio that is not WAV;
- 429: ``ASR_TRANSCRIBE_CONCURRENCY`` requests already running (``Retry-After``);
- 503: the server is draining or no worker is ready.
"""

from __future__ import annotations

import io
import ipaddress
import json
import math
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import numpy as np
import numpy.typing as npt

from gateway.protocol import parse_hotwords
from shared.errors import GatewayError, OverCapacityError, ProtocolError, ShuttingDownError
from shared.messages import SAMPLE_RATE
from shared.settings import env_positive_float, env_positive_int

REDIRECTS = 3


@dataclass(frozen=True, slots=True)
class TranscribeSettings:
    max_bytes: int = 50 << 20
    concurrency: int = 4
    fetch_timeout_s: float = 30.0
    fetch_allow_private: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TranscribeSettings:
        env = os.environ if environ is None else environ
        defaults = cls()
        allow = env.get("ASR_FETCH_ALLOW_PRIVATE", "0").strip().lower()
        return cls(
            max_bytes=env_positive_int(env, "ASR_TRANSCRIBE_MAX_BYTES", defaults.max_bytes),
            concurrency=env_positive_int(env, "ASR_TRANSCRIBE_CONCURRENCY", defaults.concurrency),
            fetch_timeout_s=env_positive_float(env, "ASR_FETCH_TIMEOUT", defaults.fetch_timeout_s),
            fetch_allow_private=allow in ("1", "true", "yes"),
        )


class TranscribeError(Exception):
    """A refusal: its HTTP status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Slots:
    """At most ``limit`` requests at once; the next is refused at once (429), never queued."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0

    def take(self) -> None:
        if self.busy >= self.limit:
            raise TranscribeError(
                429,
                f"{self.limit} transcriptions are running (ASR_TRANSCRIBE_CONCURRENCY);"
                " try again later",
            )
        self.busy += 1

    def give(self) -> None:
        self.busy -= 1


# -- decoding -----------------------------------------------------------------------------


def decode_wav(data: bytes, max_seconds: float) -> npt.NDArray[np.int16]:
    """WAV bytes -> 16 kHz mono int16. Blocking (soundfile, soxr): call it in a thread."""
    import soundfile
    import soxr

    if not data:
        raise TranscribeError(400, "the audio is empty")
    try:
        info = soundfile.info(io.BytesIO(data))
    except (RuntimeError, soundfile.LibsndfileError):
        if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
            raise TranscribeError(400, "the WAV file is truncated or corrupt") from None
        raise TranscribeError(415, "the audio is not a WAV file; send WAV (RIFF/WAVE)") from None
    if info.format not in ("WAV", "WAVEX"):
        raise TranscribeError(415, f"the audio is {info.format}, not WAV; send WAV")
    if info.frames / info.samplerate > max_seconds:
        raise TranscribeError(
            413,
            f"the audio lasts {info.frames / info.samplerate:.0f} s, more than"
            f" {max_seconds:g} s (ASR_MAX_SESSION_SECONDS)",
        )
    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError) as exc:
        raise TranscribeError(400, f"the WAV file is truncated or corrupt: {exc}") from None
    if len(samples) == 0:
        raise TranscribeError(400, "the WAV file holds no samples")
    mono = samples.mean(axis=1)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE)
    clipped = np.clip(mono * 32768.0, -32768, 32767)
    return np.asarray(np.round(clipped), dtype=np.int16)


# -- fetching -----------------------------------------------------------------------------


async def fetch(url: str, settings: TranscribeSettings) -> bytes:
    """GET ``url`` (http/https only), at most ``max_bytes``, within the fetch timeout.

    Every hop of a redirect is checked like the first URL: its host must not resolve to a
    private, loopback, link-local or otherwise internal address, unless allowed.
    """
    import httpx

    with anyio.fail_after(settings.fetch_timeout_s):
        async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
            for _ in range(REDIRECTS + 1):
                await _check_url(url, settings.fetch_allow_private)
                async with client.stream("GET", url) as response:
                    if response.is_redirect:
                        location = response.headers.get("location", "")
                        url = str(response.url.join(location))
                        continue
                    if response.status_code != 200:
                        raise TranscribeError(
                            400, f"fetching the URL gave HTTP {response.status_code}"
                        )
                    declared = response.headers.get("content-length")
                    if declared is not None and int(declared) > settings.max_bytes:
                        raise _too_large(settings.max_bytes)
                    body = bytearray()
                    async for piece in response.aiter_bytes():
                        body += piece
                        if len(body) > settings.max_bytes:
                            raise _too_large(settings.max_bytes)
                    return bytes(body)
    raise TranscribeError(400, f"more than {REDIRECTS} redirects")


def _too_large(limit: int) -> TranscribeError:
    return TranscribeError(
        413, f"the audio is larger than {limit} bytes (ASR_TRANSCRIBE_MAX_BYTES)"
    )


async def _check_url(url: str, allow_private: bool) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TranscribeError(400, f"only http and https URLs are fetched, not {url!r}")
    if allow_private:
        return
    try:
        infos = await anyio.getaddrinfo(parts.hostname, parts.port or 0, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise TranscribeError(400, f"cannot resolve {parts.hostname}: {exc}") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise TranscribeError(
                400,
                f"{parts.hostname} resolves to {address}, an internal address; such URLs"
                " are not fetched (ASR_FETCH_ALLOW_PRIVATE)",
            )


# -- the request ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AudioRequest:
    data: bytes
    source: str  # the file name or the URL
    hotwords: tuple[str, ...] = ()


def _hotwords(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    try:
        return parse_hotwords("hotwords", value)
    except ProtocolError as error:
        raise TranscribeError(400, error.message) from None


async def read_audio(content_type: str, body: Any, settings: TranscribeSettings) -> AudioRequest:
    """The audio bytes of a request, where they came from, and its hotwords.

    ``body`` is the Starlette request.
    """
    if content_type.startswith("multipart/form-data"):
        form = await body.form(max_files=1, max_fields=8, max_part_size=settings.max_bytes)
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise TranscribeError(400, "the multipart request has no 'file' field")
        if upload.size is not None and upload.size > settings.max_bytes:
            raise _too_large(settings.max_bytes)
        hotwords = form.get("hotwords")
        if hotwords is not None and not isinstance(hotwords, str):
            raise TranscribeError(400, "the 'hotwords' field must be text, not a file")
        words = _hotwords(hotwords)
        data = await upload.read()
        return AudioRequest(data, str(upload.filename or "upload"), words)
    if content_type.startswith("application/json"):
        raw = await body.body()
        if len(raw) > 65536:
            raise TranscribeError(413, "the JSON body is too large")
        try:
            payload = json.loads(raw)
        except ValueError:
            raise TranscribeError(400, "the body is not valid JSON") from None
        url = payload.get("url") if isinstance(payload, dict) else None
        if not isinstance(url, str):
            raise TranscribeError(400, 'the JSON body must be {"url": "http(s)://..."}')
        words = _hotwords(payload.get("hotwords"))
        return AudioRequest(await fetch(url, settings), url, words)
    raise TranscribeError(
        415, "send multipart/form-data with a 'file' field, or application/json with a 'url'"
    )


def refusal_for(error: GatewayError) -> TranscribeError:
    if isinstance(error, ShuttingDownError | OverCapacityError):
        return TranscribeError(503, error.message)
    return TranscribeError(500, f"decoding failed: {error.message}")


def duration_s(samples: npt.NDArray[np.int16]) -> float:
    return math.floor(len(samples) / SAMPLE_RATE * 1000) / 1000
