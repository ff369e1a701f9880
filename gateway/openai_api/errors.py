"""OpenAI's error JSON, ``{"error": {"message", "type", "param", "code"}}``, for the gateway's
refusals (``TranscribeError``: a status and a reason slug), with the status codes OpenAI's
SDK maps to its exception classes (``_make_status_error``): 400 ``BadRequestError``, 401
``AuthenticationError``, 403 ``PermissionDeniedError``, 404 ``NotFoundError``, 429
``RateLimitError``, 5xx ``InternalServerError``, any other (408, 413, 415)
``APIStatusError``.

``type`` is OpenAI's class of error; ``code`` is the reason slug (the label of
``asr_transcription_refusals_total``), or OpenAI's own name where it has one
(``invalid_api_key``, ``rate_limit_exceeded``, ``model_not_found``); ``param`` names the
one field at fault, when one is.

Headers: ``WWW-Authenticate: Bearer`` on a 401 (RFC 6750); ``Retry-After`` on a 429 (the
SDK waits that long before its retry); ``x-should-retry: false`` where a retry cannot help
(a bug: the same request fails the same way), which the SDK obeys over its own rule of
retrying 408, 409, 429 and 5xx.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.responses import JSONResponse

from gateway.files.errors import TranscribeError

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"

TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: INVALID_REQUEST,  # OpenAI's own for an unknown model
    429: "requests",  # OpenAI's for a limit on requests (rather than "tokens")
}
CODES = {
    "unauthorized": "invalid_api_key",
    "busy": "rate_limit_exceeded",
}
# The field at fault, by reason: the audio's own faults are the file's.
PARAMS = {
    "bad_wav": "file",
    "bad_rate": "file",
    "too_many_channels": "file",
    "too_large": "file",
    "too_long": "file",
    "not_wav": "file",
    "bad_model": "model",
    "model_not_found": "model",
    "bad_language": "language",
    "bad_prompt": "prompt",
    "bad_keywords": "keywords",
    "bad_response_format": "response_format",
    "bad_timestamp_granularities": "timestamp_granularities",
    "bad_temperature": "temperature",
    "bad_stream": "stream",
    "bad_include": "include",
}
NO_RETRY = frozenset({"internal"})


def openai_error_body(
    message: str, type: str, param: str | None = None, code: str | None = None
) -> dict[str, object]:
    """The object under OpenAI's ``"error"`` key (and in a Realtime ``error`` event)."""
    return {"message": message, "type": type, "param": param, "code": code}


@dataclass(frozen=True, slots=True)
class OpenAIError:
    status: int
    message: str
    type: str
    param: str | None
    code: str

    @classmethod
    def of(cls, error: TranscribeError) -> OpenAIError:
        kind = SERVER_ERROR if error.status >= 500 else TYPES.get(error.status, INVALID_REQUEST)
        code = CODES.get(error.reason, error.reason)
        return cls(error.status, error.message, kind, PARAMS.get(error.reason), code)

    def body(self) -> dict[str, object]:
        return openai_error_body(self.message, self.type, self.param, self.code)


def stream_error_event(error: TranscribeError) -> dict[str, object]:
    """A failure after a stream has started, as the SDK's ``Stream`` raises it (an
    ``APIError`` with this ``message``, ``code``, ``param``): any event with an ``error``."""
    return {"type": "error", "error": OpenAIError.of(error).body()}


def error_response(error: TranscribeError) -> JSONResponse:
    """A refusal as OpenAI's JSON error, with its status and headers."""
    headers: dict[str, str] = {}
    if error.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if error.status in (429, 503):
        headers["Retry-After"] = "1"
    if error.reason in NO_RETRY:
        headers["x-should-retry"] = "false"
    return JSONResponse({"error": OpenAIError.of(error).body()}, error.status, headers)
