"""Words and their times, as Deepgram's ``words[]`` (gateway.deepgram.words)."""
# ruff: noqa: RUF001  (Chinese text is written with full-width commas, on purpose)

from __future__ import annotations

import pytest

from gateway.deepgram.words import joined, plain, split_words, timed_words


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hello, world!", ["Hello,", "world!"]),
        ("你好，世界。", ["你", "好，", "世", "界。"]),
        ("退款 refund 政策", ["退", "款", "refund", "政", "策"]),
        ("界。Hello", ["界。", "Hello"]),  # the mark ends the word before it
        ("don't (SKU-42) stop.", ["don't", "(SKU-42)", "stop."]),
        ("16000:ab12cd34", ["16000:ab12cd34"]),  # the checksum engine's text: one word
        ("", []),
    ],
)
def test_text_into_words(text: str, words: list[str]) -> None:
    assert split_words(text) == words


def test_a_word_is_bare_and_lower_case_and_the_transcript_joins_as_written() -> None:
    assert [plain(w) for w in ["Hello,", "(SKU-42)", "好，", "don't"]] == [
        "hello",
        "sku-42",
        "好",
        "don't",
    ]
    assert joined(["你", "好", "hello", "world", "世", "界"]) == "你好 hello world 世界"


def test_token_times_time_the_words_when_there_is_one_per_word() -> None:
    words = timed_words(
        "你好，世界。", 1.0, 9.0, [(0, 200), (200, 400), (500, 700), (700, 900)], 2.0
    )
    assert [(w.word, w.punctuated_word, w.start, w.end) for w in words] == [
        ("你", "你", 2.0, 2.2),
        ("好", "好，", 2.2, 2.4),
        ("世", "世", 2.5, 2.7),
        ("界", "界。", 2.7, 2.9),
    ]


def test_without_them_the_words_are_spread_over_the_span() -> None:
    words = timed_words("one two three four", 1.0, 3.0, [(0, 100)])  # not one per word
    assert [(w.start, w.end) for w in words] == [(1.0, 1.5), (1.5, 2.0), (2.0, 2.5), (2.5, 3.0)]
