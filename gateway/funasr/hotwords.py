"""Hotwords, as FunASR's clients send them, into words: FunASR's WebSocket config and the file
endpoints' ``hotwords`` field read them here, with one set of limits (``shared.messages``),
and a value we cannot take is refused. Another protocol's free text (OpenAI's prompt,
Deepgram's keyterms) is mined instead, never refused: ``gateway.funasr.free_text``."""

from __future__ import annotations

import json
import re

from gateway.funasr.fields import read_text, refuse_constant
from shared.errors import ProtocolError
from shared.messages import MAX_HOTWORD_CHARS, MAX_HOTWORDS, MAX_HOTWORDS_BYTES

# FunASR's Python client joins its hotword file's words with commas; others use spaces.
# Also the full-width comma, the enumeration comma and the full-width semicolon.
_HOTWORD_SEPARATORS = re.compile("[\\s,;\uff0c\u3001\uff1b]+")


def parse_hotwords(name: str, value: object) -> tuple[str, ...]:
    """The words of a ``hotwords`` value, in either form FunASR's clients send: a JSON
    object string ``{"word": weight, ...}`` (the HTML5 page, the C++ client, funasr-client;
    also accepted as the object itself) or plain words separated by spaces or commas (the
    Python client). Weights are dropped: SeACo-Paraformer takes words only, and so FunASR's
    Python server would (it hands the raw string to funasr, which splits it at spaces).
    A multi-word key is split into its words, as funasr splits its hotword string."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("{"):
            try:
                value = json.loads(stripped, parse_constant=refuse_constant)
            except (ValueError, RecursionError):
                value = stripped  # as the C++ server does: not JSON, so plain words
    if isinstance(value, dict):
        words_text = " ".join(str(key) for key in value)
    elif isinstance(value, str):
        words_text = value
    else:
        raise ProtocolError(f'{name} must be a string: words, or a JSON object {{"word": weight}}')
    read_text(name, words_text)
    words = tuple(dict.fromkeys(word for word in _HOTWORD_SEPARATORS.split(words_text) if word))
    if len(words) > MAX_HOTWORDS:
        raise ProtocolError(f"{name}: at most {MAX_HOTWORDS} hotwords, got {len(words)}")
    too_long = next((word for word in words if len(word) > MAX_HOTWORD_CHARS), None)
    if too_long is not None:
        raise ProtocolError(
            f"{name}: a hotword is at most {MAX_HOTWORD_CHARS} characters, got {too_long!r:.40}"
        )
    if len(" ".join(words).encode("utf-8")) > MAX_HOTWORDS_BYTES:
        raise ProtocolError(f"{name}: at most {MAX_HOTWORDS_BYTES} bytes of UTF-8 in all")
    return words
