"""Hotwords into words, with one set of limits (``shared.messages``): strictly as FunASR's
clients send them (``parse_hotwords``: FunASR's WebSocket config, the file endpoints'
``hotwords`` field), where a value we cannot take is refused; leniently from the free text
of another protocol's field (``lenient_hotwords``: Deepgram's ``keyterm`` and ``keywords``),
where what does not fit is left out, as that protocol's server would accept it."""

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


# Around a word in free text: punctuation that is not part of it ("refund," "(SKU-42)").
_SURROUNDING_PUNCTUATION = (
    "\"'`.,:;!?()[]{}<>\u3002\uff01\uff1f\u201c\u201d\u2018\u2019\u300c\u300d"
)


def lenient_hotwords(text: str) -> tuple[str, ...]:
    """The words of free text that fit the hotword limits, in order, once each: a word
    longer than ``MAX_HOTWORD_CHARS`` (an unspaced sentence, a URL) is left out, and so is
    what is past ``MAX_HOTWORDS`` words or ``MAX_HOTWORDS_BYTES``. Never refuses."""
    words: list[str] = []
    size = -1  # the separators between words: one byte fewer than words
    for token in _HOTWORD_SEPARATORS.split(text):
        word = token.strip(_SURROUNDING_PUNCTUATION)
        if not word or len(word) > MAX_HOTWORD_CHARS or word in words or not word.isprintable():
            continue
        if len(words) == MAX_HOTWORDS or size + 1 + len(word.encode()) > MAX_HOTWORDS_BYTES:
            break
        words.append(word)
        size += 1 + len(word.encode())
    return tuple(words)
