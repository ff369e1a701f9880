"""Hotwords in every form FunASR's clients send (``gateway.funasr.hotwords``)."""

from __future__ import annotations

import pytest

from gateway.funasr.config import parse_config
from gateway.funasr.hotwords import parse_hotwords
from shared.errors import ProtocolError
from shared.messages import MAX_HOTWORD_CHARS, MAX_HOTWORDS


@pytest.mark.parametrize(
    ("hotwords", "words"),
    [
        # The HTML5 page, the C++ client and funasr-client: a JSON object string.
        ('{"阿里巴巴": 20, "达摩院": 10}', ("阿里巴巴", "达摩院")),
        ({"阿里巴巴": 20, "hello world": 40}, ("阿里巴巴", "hello", "world")),  # the object
        # FunASR's Python client joins its hotword file's first words with commas.
        ("阿里巴巴,达摩院", ("阿里巴巴", "达摩院")),
        (" 阿里巴巴  达摩院\n魔搭 ", ("阿里巴巴", "达摩院", "魔搭")),
        ("阿里巴巴\uff0c达摩院、阿里巴巴", ("阿里巴巴", "达摩院")),  # full-width, repeated
        ("{not json", ("{not", "json")),  # as the C++ server: plain words then
        ("{}", ()),  # the HTML5 page with an empty hotword box
        ("", ()),
    ],
)
def test_hotwords_in_every_form_funasr_clients_send_become_words(
    hotwords: object, words: tuple[str, ...]
) -> None:
    assert parse_hotwords("hotwords", hotwords) == words


def test_hotwords_within_the_limits_are_accepted() -> None:
    words = tuple(f"{i:0{MAX_HOTWORD_CHARS}d}" for i in range(MAX_HOTWORDS))
    assert parse_hotwords("hotwords", " ".join(words)) == words


@pytest.mark.parametrize(
    ("hotwords", "match"),
    [
        (" ".join(f"w{i}" for i in range(MAX_HOTWORDS + 1)), "at most"),
        ("x" * (MAX_HOTWORD_CHARS + 1), "at most"),
        (" ".join(f"{i:03d}" + "阿" * (MAX_HOTWORD_CHARS - 3) for i in range(200)), "bytes"),
        (["a", "b"], "must be a string"),
        (20, "must be a string"),
        ("\ud800", "not valid Unicode"),
    ],
)
def test_hotwords_past_the_limits_or_of_the_wrong_type_are_refused(
    hotwords: object, match: str
) -> None:
    with pytest.raises(ProtocolError, match=match):
        parse_hotwords("hotwords", hotwords)


def test_a_nested_hotwords_object_gives_its_keys() -> None:
    hotwords: dict[str, object] = {}
    for _ in range(100_000):
        hotwords = {"w": hotwords}
    assert parse_config({"hotwords": hotwords}).hotwords == ("w",)
