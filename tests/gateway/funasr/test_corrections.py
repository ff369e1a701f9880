"""Hotwords on every result (gateway.funasr.corrections): rules that must fire, near misses
that must not, and the bounds. Chinese text by construction: a hotword's homophone (the same
toneless pinyin) or one merged initial away must become it; one syllable wholly other must
not."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.funasr import corrections
from gateway.funasr.config import SessionConfig
from gateway.funasr.corrections import (
    MAX_FUZZY_HOTWORDS,
    MAX_FUZZY_TEXT_CHARS,
    Corrections,
    Rule,
    load_hotword_rules,
    parse_rule,
    read_rules,
    split_hotwords,
)


def test_rules_replace_exact_text_the_longest_first_in_one_pass() -> None:
    fix = Corrections(
        (Rule("para", "PARA"), Rule("paraformer", "Paraformer"), Rule("A", "B"), Rule("B", "C"))
    )
    assert fix.apply("use paraformer, para and A") == "use Paraformer, PARA and B"  # B not then C


@pytest.mark.parametrize(
    ("heard", "shown"),
    [
        ("我们的玄界芯片很好", "我们的玄戒芯片很好"),  # a homophone: 界 for 戒
        ("悬界心骗", "玄戒芯片"),  # every syllable the same, every character other
        ("福南人来了", "湖南人来了"),  # f/h merged: one syllable at 0.75, mean 0.92
        ("玄戒芯片玄界芯片", "玄戒芯片玄戒芯片"),  # the hotword itself kept, the next fixed
    ],
)
def test_what_sounds_like_a_chinese_hotword_becomes_it(heard: str, shown: str) -> None:
    assert Corrections.of(["玄戒芯片", "湖南人"]).apply(heard) == shown


@pytest.mark.parametrize(
    "heard",
    [
        "选择芯片",  # xuan ze: ze is not jie, nor one merge away (score 0.75 < 0.85)
        "玄戒",  # shorter than the hotword
        "湖北人",  # bei is not nan
        "今天天气很好",
    ],
)
def test_a_near_miss_is_left_as_it_is(heard: str) -> None:
    assert Corrections.of(["玄戒芯片", "湖南人"]).apply(heard) == heard


def test_a_sessions_hotwords_split_into_words_for_the_model_and_rules_for_the_text() -> None:
    words, rules = split_hotwords(("阿里巴巴", "paraformer=>Paraformer", "=>x", "a=>", "b=>b"))
    assert (words, rules) == (("阿里巴巴",), (Rule("paraformer", "Paraformer"),))
    options = SessionConfig(hotwords=("阿里巴巴", "paraformer=>Paraformer")).stream_options()
    assert options.hotwords == ("阿里巴巴",)  # a model is never biased with a rule


def test_no_hotwords_no_work() -> None:
    assert not Corrections.of(["hello", "x" * 40])  # no rule, no Chinese hotword
    assert Corrections.of(["hello"]).apply("hello world") == "hello world"


def test_the_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    many = [f"甲{chr(0x4E00 + n)}" for n in range(MAX_FUZZY_HOTWORDS + 10)]
    assert len(Corrections.of(many)._fuzzy) == MAX_FUZZY_HOTWORDS
    # Past MAX_FUZZY_TEXT_CHARS the pinyin pass stops; rules still apply.
    fix = Corrections.of(["玄戒芯片", "a=>b"])
    text = "一" * MAX_FUZZY_TEXT_CHARS + "玄界芯片a"
    assert fix.apply(text) == "一" * MAX_FUZZY_TEXT_CHARS + "玄界芯片b"
    looked_up: list[str] = []

    def syllable(char: str) -> str:
        looked_up.append(char)
        return "x"

    monkeypatch.setattr(corrections, "_syllable", syllable)
    Corrections.of(["a=>b"]).apply("玄界芯片")
    assert looked_up == []  # no Chinese hotword: no pinyin looked up


def test_a_rules_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.txt"
    path.write_text("# ours\nparaformer => Paraformer\n\n公投安装=>弓头安装\n", encoding="utf-8")
    assert load_hotword_rules(str(path)) == (
        Rule("paraformer", "Paraformer"),
        Rule("公投安装", "弓头安装"),
    )
    assert load_hotword_rules(None) == ()
    with pytest.raises(ValueError, match=r"rules.txt:2: not a rule 'wrong=>right': 'oops'"):
        read_rules(["a=>b", "oops"], "rules.txt")
    with pytest.raises(ValueError, match="ASR_HOTWORD_RULES=/nope: cannot read it"):
        load_hotword_rules("/nope")
    assert parse_rule("x") is None
