"""The project's error hierarchy. Each error carries the WebSocket close code it maps to."""

from __future__ import annotations

from typing import ClassVar

# WebSocket close codes (RFC 6455 and the IANA registry), as named in design.md.
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
