"""A transcript's words with their times, as Deepgram's ``words[]`` gives them (sans I/O).

A word is a run of text between spaces, or one CJK character (Chinese is written without
spaces, and Paraformer gives one token per character); punctuation goes with the word before
it, in ``punctuated_word`` only, and ``word`` is lower case, as Deepgram's. Times come from
the model's token times where it gives one per word (the offline Paraformers with
timestamps, SenseVoice does not); else the words are spread evenly over the time the
transcript covers, which docs/deepgram.md says per model.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

# CJK ideographs, kana and hangul syllables: each a word of its own.
_CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK = re.compile(f"[{_CJK_RANGES}]")
# A CJK character alone, or a run of anything else but spaces (marks inside it stay).
_TOKENS = re.compile(f"[{_CJK_RANGES}]|[^\\s{_CJK_RANGES}]+")
_ENDING = {"Po", "Pe", "Pf"}  # other, closing and final punctuation: not "(" or an opening quote


@dataclass(frozen=True, slots=True)
class Word:
    word: str
    punctuated_word: str
    start: float
    end: float
    speaker: int | None = None  # with diarize: its sentence's live speaker
    speaker_name: str | None = None  # ours: that speaker's name, a known speaker's

    def message(self, confidence: float) -> dict[str, object]:
        message: dict[str, object] = {
            "word": self.word,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "confidence": confidence,
            "punctuated_word": self.punctuated_word,
        }
        if self.speaker is not None:
            message["speaker"] = self.speaker
        if self.speaker_name is not None:
            message["speaker_name"] = self.speaker_name
        return message


def split_words(text: str) -> list[str]:
    """``text``'s words, each with the punctuation that follows it."""
    words: list[str] = []
    for token in _TOKENS.findall(text):
        # Closing and final marks at a token's start end the word before ("界。Hello").
        cut = 0
        while cut < len(token) and unicodedata.category(token[cut]) in _ENDING:
            cut += 1
        if words and cut:
            words[-1] += token[:cut]
            token = token[cut:]
        if token:
            words.append(token)
    return words


def plain(word: str) -> str:
    """Deepgram's ``word``: the word without the punctuation around it, in lower case."""
    marks = "".join(c for c in word if unicodedata.category(c).startswith("P"))
    return (word.strip(marks) or word).lower()


def timed_words(
    text: str,
    start: float,
    end: float,
    token_times_ms: Sequence[tuple[int, int]] | None = None,
    origin: float = 0.0,
) -> list[Word]:
    """``text``'s words: timed by ``token_times_ms`` (ms after ``origin`` seconds) where
    there is one per word, else spread evenly over ``start`` to ``end`` seconds."""
    words = split_words(text)
    if token_times_ms is not None and len(token_times_ms) == len(words):
        return [
            Word(plain(w), w, origin + begin / 1000, origin + finish / 1000)
            for w, (begin, finish) in zip(words, token_times_ms, strict=True)
        ]
    span = max(0.0, end - start) / max(1, len(words))
    return [
        Word(plain(w), w, start + index * span, start + (index + 1) * span)
        for index, w in enumerate(words)
    ]


def joined(words: Sequence[str]) -> str:
    """Words back into a transcript: CJK characters side by side, others spaced."""
    text = ""
    previous = ""
    for word in words:
        if text and not (_CJK.match(previous[0]) and _CJK.match(word[0])):
            text += " "
        text += word
        previous = word
    return text
