"""A punctuated text and its tokens' times as sentences (``SentenceStamp``), split where
funasr splits them (``funasr.utils.timestamp_tools.timestamp_sentence``): after every
punctuation mark the CT-Transformer writes (the full-width comma, full stop, question mark
and enumeration comma, and , . ? for English), each sentence
with its tokens' times. It runs before ITN, on the text the times belong to.

funasr pairs the punctuation model's ids with the tokens; the punctuated text carries the
same marks after the same tokens, so reading the text gives the same pairs. A token is a
CJK character or an English word, as the model's text has them. Where the tokens and the
times do not pair up (a text the model did not write token by token), there are no
sentences rather than wrong ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from shared.messages import SentenceStamp

# The full-width comma, full stop, question mark and enumeration comma; English , . ?
PUNCTUATION = frozenset("\uff0c\u3002\uff1f\u3001,.?")
# An English word (letters, digits, apostrophes), or any one other character that is not
# a space: a CJK character, or a punctuation mark.
_TOKENS = re.compile(r"[A-Za-z0-9']+|\S")


def stamp_sentences(text: str, times: Sequence[tuple[int, int]]) -> tuple[SentenceStamp, ...]:
    tokens: list[list[str]] = []  # [token, the punctuation after it]
    for token in _TOKENS.findall(text):
        if token in PUNCTUATION:
            if tokens:
                tokens[-1][1] = token
            continue
        tokens.append([token, ""])
    if not tokens or len(tokens) != len(times):
        return ()
    sentences: list[SentenceStamp] = []
    words: list[str] = []
    stamps: list[tuple[int, int]] = []
    for (token, punc), stamp in zip(tokens, times, strict=True):
        words.append(token)
        stamps.append((int(stamp[0]), int(stamp[1])))
        if punc:
            sentences.append(_sentence(words, punc, stamps))
            words, stamps = [], []
    if words:
        sentences.append(_sentence(words, "", stamps))
    return tuple(sentences)


def _sentence(words: list[str], punc: str, stamps: list[tuple[int, int]]) -> SentenceStamp:
    return SentenceStamp(" ".join(words), punc, stamps[0][0], stamps[-1][1], tuple(stamps))
