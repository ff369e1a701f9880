"""The client's control messages on ``/v1/listen`` (sans I/O): ``KeepAlive``, ``Finalize``,
``CloseStream`` and ``Configure``, as Deepgram's API reference and its SDK define them.
Anything else is a :class:`ControlError`, which Deepgram answers with an ``Error`` of the
``SchemaError`` variant, keeping the stream open."""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.funasr.fields import refuse_constant

MAX_QUOTED_CHARS = 200  # of a refused message, quoted back in the Error


@dataclass(frozen=True, slots=True)
class KeepAlive:
    pass


@dataclass(frozen=True, slots=True)
class Finalize:
    pass


@dataclass(frozen=True, slots=True)
class CloseStream:
    pass


@dataclass(frozen=True, slots=True)
class Configure:
    """New keyterms for the stream (``None``: keep them); its ``features`` are not taken."""

    keyterms: tuple[str, ...] | None


Control = KeepAlive | Finalize | CloseStream | Configure


class ControlError(ValueError):
    def __init__(self, message: str, original: str) -> None:
        super().__init__(message)
        self.message = message
        self.original = original[:MAX_QUOTED_CHARS]


def parse_control(text: str) -> Control:
    try:
        message = json.loads(text, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        raise ControlError("not a JSON message", text) from None
    kind = message.get("type") if isinstance(message, dict) else None
    match kind:
        case "KeepAlive":
            return KeepAlive()
        case "Finalize":
            return Finalize()
        case "CloseStream":
            return CloseStream()
        case "Configure":
            keyterms = message.get("keyterms")
            if keyterms is None:
                return Configure(None)
            if not isinstance(keyterms, list) or not all(isinstance(k, str) for k in keyterms):
                raise ControlError("Configure: keyterms must be a list of strings", text)
            return Configure(tuple(keyterms))
    raise ControlError(
        f"unknown message type {str(kind)[:40]!r}: KeepAlive, Finalize, CloseStream or Configure",
        text,
    )
