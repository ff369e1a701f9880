"""JSON text of the messages the server sends: FunASR's results and our error message."""

from __future__ import annotations

import json
from collections.abc import Mapping

_RESULT_FIELDS = frozenset({"mode", "text", "wav_name", "is_final"})


def _dumps(message: Mapping[str, object]) -> str:
    # allow_nan=False: NaN and Infinity are not JSON, and browsers' JSON.parse rejects them.
    return json.dumps(message, ensure_ascii=False, allow_nan=False)


def result_message(
    *,
    mode: str,
    text: str,
    wav_name: str,
    is_final: bool,
    extra: Mapping[str, object] | None = None,
) -> str:
    """A FunASR result: ``mode``, ``text``, ``wav_name``, ``is_final``, then ``extra``.

    ``extra`` may only add fields, so a FunASR client reads the result as it always has;
    one that would replace a FunASR field raises ``ValueError``.
    """
    message: dict[str, object] = {
        "mode": mode,
        "text": text,
        "wav_name": wav_name,
        "is_final": is_final,
    }
    if extra:
        clash = _RESULT_FIELDS.intersection(extra)
        if clash:
            raise ValueError(f"extra fields would replace FunASR's: {', '.join(sorted(clash))}")
        message.update(extra)
    return _dumps(message)


def error_message(code: int, message: str) -> str:
    """Our error message, sent once before closing with ``code``; FunASR clients ignore it."""
    return _dumps({"type": "error", "code": code, "message": message})
