"""A FunASR frame's JSON values read into Python ones: each reader takes the field's name (for
the message) and the raw value, and raises ``ProtocolError`` naming the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from shared.errors import ProtocolError


def is_int(value: object) -> TypeGuard[int]:
    # JSON true/false arrive as Python bools, which are ints; FunASR never means them as such.
    return isinstance(value, int) and not isinstance(value, bool)


def int_in(low: int, high: int) -> Callable[[str, object], int]:
    def check(name: str, value: object) -> int:
        if not is_int(value) or not low <= value <= high:
            raise ProtocolError(f"{name} must be an integer in {low}..{high}, got {value!r:.40}")
        return value

    return check


def read_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"{name} must be a string")
    try:
        # A JSON "\ud800" escape parses to a lone surrogate, which could never be sent back.
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(f"{name} is not valid Unicode text") from None
    return value


def read_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"{name} must be true or false")
    return value


def refuse_constant(name: str) -> object:
    # Python's json takes NaN and Infinity; they are not JSON and no config field needs them.
    raise ValueError(f"{name} is not a JSON value")
