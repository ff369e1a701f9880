"""JSON text of the messages the server sends: FunASR's results, its end-of-input
acknowledgement, and our error message.

Every one carries FunASR's four result fields, ``mode``, ``text``, ``wav_name`` and
``is_final``, because FunASR's clients read them off every frame: its HTML5 page appends
``"" + msg.text`` (a frame without ``text`` shows as "undefined"), funasr-client indexes
``msg["mode"]``, and a truthy ``is_final`` ends a client's wait.
"""

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


def end_acknowledgement(*, mode: str, wav_name: str, error: str | None = None) -> str:
    """FunASR's answer to an end frame with ``"is_end": true`` (its Python server @3c58cb5),
    after the utterance's last result: ``is_final`` true, or false with ``error`` when the
    utterance failed. ``mode`` is the session's (``online``, ``offline``, ``2pass``)."""
    message: dict[str, object] = {
        "mode": mode,
        "text": "",
        "wav_name": wav_name,
        "is_final": error is None,
        "is_end": True,
    }
    if error is not None:
        message["error"] = error
    return _dumps(message)


def error_message(code: int, message: str, mode: str = "2pass", wav_name: str = "") -> str:
    """Our error message, sent once before closing with ``code``. FunASR's clients see a
    result with empty text that is not final (they display nothing); ours read ``type``."""
    return _dumps(
        {
            "type": "error",
            "code": code,
            "message": message,
            "mode": mode,
            "text": "",
            "wav_name": wav_name,
            "is_final": False,
        }
    )
