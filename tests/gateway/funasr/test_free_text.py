"""gateway.funasr.free_text: another protocol's free text (OpenAI's prompt and keywords,
Deepgram's keyterms) as hotwords, never refused, always a word list FunASR's strict parser
takes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.funasr.free_text import free_text_hotwords, hotwords_text
from gateway.funasr.hotwords import parse_hotwords
from shared.errors import ProtocolError
from shared.messages import MAX_HOTWORD_CHARS, MAX_HOTWORDS, MAX_HOTWORDS_BYTES

REFUND = (
    "The following is a call about a refund, with terms like 退款 and"
    " https://example.com/refund-policy"
)


def test_a_sentence_gives_its_words_without_the_marks_around_them() -> None:
    assert free_text_hotwords(REFUND) == (
        "The",
        "following",
        "is",
        "a",
        "call",
        "about",
        "refund",
        "with",
        "terms",
        "like",
        "退款",
        "and",
    )


@pytest.mark.parametrize("prompt", [None, "", "   ", "\n\t", "... !!! ?", '"" () []'])
def test_an_empty_prompt_gives_no_hotwords(prompt: str | None) -> None:
    assert free_text_hotwords(prompt) == ()


def test_a_word_over_the_hotword_length_is_dropped_not_refused() -> None:
    long = "x" * (MAX_HOTWORD_CHARS + 1)
    fits = "y" * MAX_HOTWORD_CHARS
    with pytest.raises(ProtocolError):
        parse_hotwords("hotwords", long)  # FunASR's dialect stays strict
    assert free_text_hotwords(f"{long} {fits}") == (fits,)


def test_an_unspaced_chinese_sentence_is_cut_at_its_punctuation() -> None:
    # The full-width comma and exclamation mark as escapes (ruff: they look like ASCII).
    prompt = "这是一个关于退款的电话\uff0c涉及退款政策和发票。请注意「增值税专用发票」\uff01"
    assert free_text_hotwords(prompt) == (
        "这是一个关于退款的电话",
        "涉及退款政策和发票",
        "请注意",
        "增值税专用发票",
    )
    # No mark to cut at and over 32 characters: nothing to take from it.
    assert (
        free_text_hotwords("这是一段很长的没有任何标点符号的中文句子它的长度超过了三十二个字符")
        == ()
    )


@pytest.mark.parametrize(
    "address",
    [
        "https://example.com/refund-policy",
        "http://x.io",
        "www.acme.com",
        "support@acme.com",
        "ftp://h/f",
    ],
)
def test_addresses_are_dropped_whatever_their_length(address: str) -> None:
    assert free_text_hotwords(f"see {address} now") == ("see", "now")


def test_punctuation_inside_a_word_stays() -> None:
    assert free_text_hotwords("Node.js, C#; (e-mail) 3.5! don\u2019t ジョン・スミス") == (
        "Node.js",
        "C#",
        "e-mail",
        "3.5",
        "don\u2019t",
        "ジョン・スミス",
    )


def test_too_many_words_are_capped_not_refused() -> None:
    words = free_text_hotwords(" ".join(f"w{n}" for n in range(2000)))
    assert words == tuple(f"w{n}" for n in range(MAX_HOTWORDS))


def test_the_bytes_are_capped_too() -> None:
    # 32 four-byte characters a word: 129 bytes with its separator.
    words = free_text_hotwords(" ".join(chr(0x20000 + n) * 32 for n in range(200)))
    assert len(hotwords_text(words).encode()) <= MAX_HOTWORDS_BYTES
    assert len(words) == (MAX_HOTWORDS_BYTES + 1) // 129


def test_keywords_come_first_and_each_word_once() -> None:
    assert free_text_hotwords("refund Acme refund", ["Acme Cloud", "退款", "Acme"]) == (
        "Acme",
        "Cloud",
        "退款",
        "refund",
    )


def test_a_json_object_prompt_gives_its_keys_as_funasr_reads_it() -> None:
    assert free_text_hotwords('{"阿里巴巴": 20, "达摩院": 10}') == ("阿里巴巴", "达摩院")
    # Prose that only starts with a brace is prose.
    assert free_text_hotwords("{draft} refund") == ("draft", "refund")


def test_a_lone_surrogate_word_is_dropped() -> None:
    assert free_text_hotwords("ok \ud800 fine") == ("ok", "fine")


@settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=400),
    st.lists(st.text(max_size=40), max_size=8),
)
def test_any_text_gives_words_funasrs_strict_parser_takes_as_they_are(
    prompt: str, keywords: list[str]
) -> None:
    words = free_text_hotwords(prompt, keywords)
    if words:
        assert parse_hotwords("hotwords", hotwords_text(words)) == words
    assert all(0 < len(word) <= MAX_HOTWORD_CHARS for word in words)
