"""The project's error hierarchy. Each error carries the WebSocket close code it maps to."""

from __future__ import annotations

import copy
from typing import ClassVar, Self

# WebSocket close codes (RFC 6455 and the IANA registry), as docs/protocol.md lists them.
CLOSE_NORMAL = 1000
CLOSE_POLICY_VIOLATION = 1008
CLOSE_MESSAGE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011
CLOSE_SERVICE_RESTART = 1012
CLOSE_TRY_AGAIN_LATER = 1013


class GatewayError(Exception):
    """Base of every error the gateway reports to a client or a library user."""

    close_code: ClassVar[int] = CLOSE_INTERNAL_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def copy(self) -> Self:
        """The same error, never raised: what to raise where one error reaches several tasks
        (a lost worker's streams). One instance raised in two tasks gathers both tasks'
        frames in its traceback, and whoever clears that traceback's frames would close the
        other task's suspended coroutines."""
        clone = copy.copy(self)  # by its class and args, with no traceback, cause or context
        clone.__traceback__ = None
        return clone


class ProtocolError(GatewayError):
    """The client broke the protocol: bad JSON, bad config, audio in the wrong place."""

    close_code = CLOSE_POLICY_VIOLATION


class FrameTooLargeError(GatewayError):
    close_code = CLOSE_MESSAGE_TOO_BIG


class OverCapacityError(GatewayError):
    """No room for another session or stream; the client may try again later."""

    close_code = CLOSE_TRY_AGAIN_LATER


class ShuttingDownError(GatewayError):
    close_code = CLOSE_SERVICE_RESTART


class WorkerError(GatewayError):
    """A worker died, hung, or its engine raised while serving a stream."""

    close_code = CLOSE_INTERNAL_ERROR


class WorkerLoadError(WorkerError):
    """A worker could not load its engine; carries the worker's own error text."""


class StreamClosedError(GatewayError):
    """The stream was used after it was closed or finished."""

    close_code = CLOSE_INTERNAL_ERROR


# Resume failures (gateway.session.resume.resumes): close codes in the private range
# (4000-4999), named after the HTTP status that means the same, so that a client can tell
# them apart.
CLOSE_RESUME_INVALID = 4400
CLOSE_RESUME_FORBIDDEN = 4403
CLOSE_RESUME_EXPIRED = 4404
CLOSE_RESUME_REUSED = 4409
CLOSE_RESUME_RESULTS_GONE = 4410
CLOSE_RESUME_MISDIRECTED = 4421
CLOSE_RESUME_THROTTLED = 4429


class ResumeError(GatewayError):
    """A resume the gateway refuses; ``outcome`` labels ``asr_resumes_total``."""

    close_code = CLOSE_RESUME_INVALID
    outcome: ClassVar[str] = "invalid"


class ResumeForbiddenError(ResumeError):
    """The token's session was opened with another API key."""

    close_code = CLOSE_RESUME_FORBIDDEN
    outcome = "forbidden"


class ResumeExpiredError(ResumeError):
    """The session is no longer held: its resume window passed, or it ended."""

    close_code = CLOSE_RESUME_EXPIRED
    outcome = "expired"


class ResumeReusedError(ResumeError):
    """The token was used already: each resume hands out the next one."""

    close_code = CLOSE_RESUME_REUSED
    outcome = "reused"


class ResumeDisplacedError(ResumeReusedError):
    """A later resume of the same session took it over before this one was served."""

    outcome = "displaced"


class ResumeThrottledError(ResumeError):
    """The session was resumed more often than ASR_MAX_RESUMES_PER_MINUTE allows; the
    token is not used up, and the same resume may come again a little later."""

    close_code = CLOSE_RESUME_THROTTLED
    outcome = "throttled"


class ResultsGoneError(ResumeError):
    """Results the client says it lacks are no longer held (or were never issued)."""

    close_code = CLOSE_RESUME_RESULTS_GONE
    outcome = "results_gone"


class ResumeMisdirectedError(ResumeError):
    """The token names another replica; ``replica`` is where the session lives."""

    close_code = CLOSE_RESUME_MISDIRECTED
    outcome = "misdirected"

    def __init__(self, message: str, replica: str) -> None:
        super().__init__(message)
        self.replica = replica


class UnknownModelError(ProtocolError):
    """A session or request named a model this gateway does not serve (1008; HTTP 404)."""
