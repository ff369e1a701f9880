"""Sentences of a punctuated text with its tokens' times (FunASR's C++ server's
``stamp_sents``): the split at each punctuation mark, English words as tokens, and no
sentences where tokens and times do not pair up."""

from __future__ import annotations

from shared.messages import SentenceStamp
from workers.engines.sentences import stamp_sentences

TIMES = [(i * 100, i * 100 + 80) for i in range(10)]


def test_a_sentence_ends_at_every_punctuation_mark() -> None:
    text = "正是因为\uff0c他来了\u3002hello world, ok"  # full-width comma and full stop
    assert stamp_sentences(text, TIMES) == (
        SentenceStamp("正 是 因 为", "\uff0c", 0, 380, tuple(TIMES[0:4])),
        SentenceStamp("他 来 了", "\u3002", 400, 680, tuple(TIMES[4:7])),
        SentenceStamp("hello world", ",", 700, 880, tuple(TIMES[7:9])),
        SentenceStamp("ok", "", 900, 980, tuple(TIMES[9:10])),
    )


def test_a_text_without_punctuation_is_one_sentence() -> None:
    assert stamp_sentences("一二三", TIMES[:3]) == (
        SentenceStamp("一 二 三", "", 0, 280, tuple(TIMES[:3])),
    )


def test_tokens_and_times_that_do_not_pair_up_give_no_sentences() -> None:
    assert stamp_sentences("一二三", TIMES[:2]) == ()
    assert stamp_sentences("", ()) == ()
