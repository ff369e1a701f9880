"""Hotwords from another protocol's free text (sans I/O): OpenAI's ``prompt`` and
``keywords``, Deepgram's ``keyterm`` and ``keywords``.

That text is prose or a list of terms written for another server, and is never refused: a
model that takes hotwords (SeACo-Paraformer, the Contextual Paraformer) is biased by the
words in it that fit a FunASR hotword (``shared.messages``: at most 32 characters each, 256
of them, 16 KiB in all); the rest is dropped without a word. FunASR's own dialect keeps its
strict rules and its refusals (``gateway.funasr.hotwords``): there the client wrote a word
list, and a word we cannot take is the client's mistake to be told; here it is prose we
only mine.

The words: the terms' first (a client that names terms means them most), then the
prose's, in order, each once. Text is cut at whitespace, at FunASR's separators (commas
and semicolons, full-width too) and at the sentence punctuation of CJK text (``。``,
``「``, ``」`` ...), which has no spaces to cut at; the marks around a word (``"refund,"``,
``(terms)``) are trimmed off. Dropped: a word over 32 characters (an unspaced sentence, a
long URL), an address (``https://...``, ``www.``, an e-mail), which no one says as it is
written, and the words past the caps. What comes out is a word list FunASR's strict
parser takes as it is, joined with spaces (``hotwords_text``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence

from gateway.funasr.corrections import RULE_ARROW
from gateway.funasr.fields import refuse_constant
from shared.messages import MAX_HOTWORD_CHARS, MAX_HOTWORDS, MAX_HOTWORDS_BYTES

# FunASR's separators (``gateway.funasr.hotwords``): whitespace, commas and semicolons,
# full-width too, and the enumeration comma.
_FUNASR_SEPARATORS = "\\s,;\uff0c\u3001\uff1b"
_RUN = re.compile(f"[^{_FUNASR_SEPARATORS}]+")
# Marks kept inside a word: the typographic apostrophe (U+2019: "don't" as phones type
# it), the middle dots of transliterated names ("ジョン・スミス", "奥巴马·...").
_WORD_INTERNAL = frozenset("\u2019\u00b7\u30fb\u2027")
# Trimmed off a word's ends: ASCII sentence marks, quotes and brackets. Marks inside a word
# stay: "Node.js", "e-mail", "C#", "3.5".
_EDGE_MARKS = ".,:;!?'\"()[]{}<>`"


def free_text_hotwords(prose: str | None, terms: Sequence[str] = ()) -> tuple[str, ...]:
    """The hotwords in ``terms`` and ``prose``, within FunASR's limits; never refuses.

    Prose that is a JSON object (``{"word": weight}``, FunASR's form, which our docs once
    offered for OpenAI's prompt) gives its keys, as FunASR's parser reads it."""
    texts: list[str] = list(terms)
    if prose:
        texts.extend(_weighted_words(prose) or [prose])
    words: dict[str, None] = {}
    size = -1  # the separators: one fewer than the words
    for word in _words(texts):
        if word in words:
            continue
        cost = len(word.encode("utf-8")) + 1
        if len(words) == MAX_HOTWORDS or size + cost > MAX_HOTWORDS_BYTES:
            break  # the first words that fit: the rest of a long prompt adds nothing
        words[word] = None
        size += cost
    return tuple(words)


def hotwords_text(words: Iterable[str]) -> str:
    """The words as a FunASR config's ``hotwords``: separated by spaces."""
    return " ".join(words)


def _weighted_words(prompt: str) -> list[str] | None:
    stripped = prompt.strip()
    if not stripped.startswith("{"):
        return None
    try:
        value = json.loads(stripped, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return None  # prose that starts with a brace
    return [str(key) for key in value] if isinstance(value, dict) else None


def _words(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        for run in _RUN.finditer(text):
            if RULE_ARROW in run.group():  # a correction rule, "wrong=>right": kept whole
                if _fits(run.group()):
                    yield run.group()
                continue
            for piece in _cut_at_cjk_marks(run.group()):
                word = piece.strip(_EDGE_MARKS)
                if word and _fits(word):
                    yield word


def _cut_at_cjk_marks(run: str) -> list[str]:
    """``run`` cut at the punctuation that is not ASCII: in unspaced text (Chinese,
    Japanese) it is the only place a phrase ends."""
    if run.isascii():
        return [run]
    pieces: list[str] = []
    start = 0
    for at, char in enumerate(run):
        if not char.isascii() and char not in _WORD_INTERNAL and _is_punctuation(char):
            pieces.append(run[start:at])
            start = at + 1
    pieces.append(run[start:])
    return pieces


def _is_punctuation(char: str) -> bool:
    return unicodedata.category(char).startswith("P")


def _fits(word: str) -> bool:
    if len(word) > MAX_HOTWORD_CHARS:
        return False
    if "://" in word or "@" in word or word.lower().startswith("www."):
        return False  # an address: its letters as hotwords would bias toward nonsense
    try:
        word.encode("utf-8")  # a lone surrogate ("\ud800" in JSON) cannot be sent on
    except UnicodeEncodeError:
        return False
    return True
