"""gateway.openai_api.formats with sentences: a cue and a ``verbose_json`` segment per
sentence, each with its sentence's times and the text the final text writes for it."""

from __future__ import annotations

import pytest
from openai.types.audio import TranscriptionVerbose

from gateway.openai_api import formats
from gateway.openai_api.formats import (
    FileTranscript,
    TimedSegment,
    compression_ratio,
    sentence_texts,
    srt,
    verbose_json,
    vtt,
)
from shared.messages import SentenceStamp
from workers.engines import sentences as worker_sentences


def test_a_sentence_ends_at_the_marks_the_worker_splits_after() -> None:
    assert formats.PUNCTUATION == worker_sentences.PUNCTUATION


def stamp(text_seg: str, punc: str, *times: tuple[int, int]) -> SentenceStamp:
    return SentenceStamp(text_seg, punc, times[0][0], times[-1][1], times)


@pytest.mark.parametrize(
    ("text", "sentences", "texts"),
    [
        (
            "你好\uff0c世界。",
            [stamp("你 好", "\uff0c", (0, 1), (1, 2)), stamp("世 界", "。", (2, 3), (3, 4))],
            ("你好\uff0c", "世界。"),
        ),
        (  # the last sentence without a mark runs to the end
            "你好\uff0c世界",
            [stamp("你 好", "\uff0c", (0, 1), (1, 2)), stamp("世 界", "", (2, 3), (3, 4))],
            ("你好\uff0c", "世界"),
        ),
        (  # ITN's numbers are kept: the marks are the sentences'
            "123\uff0c好。",
            [stamp("一 百 二 十 三", "\uff0c", (0, 1), (1, 5)), stamp("好", "。", (5, 6))],
            ("123\uff0c", "好。"),
        ),
        (
            "hello world, how are you?",
            [stamp("hello world", ",", (0, 1), (1, 2)), stamp("how are you", "?", (2, 5))],
            ("hello world,", "how are you?"),
        ),
        (  # ITN wrote a mark ("3.5"): the sentences' own tokens, before ITN
            "3.5\uff0c好。",
            [stamp("三 点 五", "\uff0c", (0, 1), (1, 3)), stamp("好", "。", (3, 4))],
            ("三点五\uff0c", "好。"),
        ),
        (  # two marks in a row, of which the split kept the last
            "好\uff1f。对。",
            [stamp("好", "。", (0, 1)), stamp("对", "。", (1, 2))],
            ("好。", "对。"),
        ),
        (  # text after the last sentence's mark: not these sentences
            "好。对",
            [stamp("好", "。", (0, 1))],
            ("好。",),
        ),
        (  # the tokens joined as the model's text joins them: a space between words only
            "garbled",
            [stamp("欢 迎 hello world 们", "。", (0, 5))],
            ("欢迎hello world们。",),
        ),
    ],
    ids=[
        "marks",
        "open-end",
        "itn-numbers",
        "english",
        "itn-mark",
        "marks-in-a-row",
        "text-after",
        "mixed-tokens",
    ],
)
def test_a_sentences_text_is_the_final_texts_where_the_marks_agree(
    text: str, sentences: list[SentenceStamp], texts: tuple[str, ...]
) -> None:
    assert sentence_texts(text, sentences) == texts


# Times in the file: the second decoded segment starts at 3000 ms, its sentences moved there.
SENTENCES = FileTranscript(
    text="你好\uff0c世界。 再见",
    duration_s=5.0,
    language="",
    segments=(
        TimedSegment(
            0,
            3000,
            "你好\uff0c世界。",
            ((100, 300), (300, 500), (900, 1100), (1100, 1400)),
            (
                stamp("你 好", "\uff0c", (100, 300), (300, 500)),
                stamp("世 界", "。", (900, 1100), (1100, 1400)),
            ),
        ),
        TimedSegment(3000, 3500, "", ()),  # silence: no cue
        TimedSegment(
            3500,
            5000,
            "再见",
            ((3600, 3800), (3800, 4200)),
            (stamp("再 见", "", (3600, 3800), (3800, 4200)),),
        ),
    ),
)


def test_verbose_json_has_a_segment_per_sentence_timed_by_it() -> None:
    body = verbose_json(SENTENCES, ("segment", "word"))
    parsed = TranscriptionVerbose.model_validate(body)
    assert parsed.segments is not None
    assert [(s.id, s.seek, s.start, s.end, s.text) for s in parsed.segments] == [
        (0, 0, 0.1, 0.5, "你好\uff0c"),
        (1, 0, 0.9, 1.4, "世界。"),  # seek: where its decoded segment starts
        (2, 350, 3.6, 4.2, "再见"),
    ]
    assert [s.compression_ratio for s in parsed.segments] == [
        compression_ratio(text) for text in ("你好\uff0c", "世界。", "再见")
    ]
    # The words still come from the decoded segments' token times.
    assert parsed.words is not None
    assert [w.word for w in parsed.words] == ["你", "好", "世", "界", "再", "见"]
    assert parsed.text == SENTENCES.text


def test_subtitles_have_a_cue_per_sentence() -> None:
    assert srt(SENTENCES) == (
        "1\n00:00:00,100 --> 00:00:00,500\n你好\uff0c\n\n"
        "2\n00:00:00,900 --> 00:00:01,400\n世界。\n\n"
        "3\n00:00:03,600 --> 00:00:04,200\n再见\n\n"
    )
    assert vtt(SENTENCES) == (
        "WEBVTT\n\n"
        "00:00:00.100 --> 00:00:00.500\n你好\uff0c\n\n"
        "00:00:00.900 --> 00:00:01.400\n世界。\n\n"
        "00:00:03.600 --> 00:00:04.200\n再见\n\n"
    )


def test_a_segment_without_sentences_is_one_cue_beside_those_with() -> None:
    mixed = FileTranscript(
        "你好\uff0c世界。 再见",
        5.0,
        "",
        (SENTENCES.segments[0], TimedSegment(3500, 5000, "再见", ((3600, 3800), (3800, 4200)))),
    )
    assert [(c.start_ms, c.end_ms, c.text, c.seek_ms) for c in mixed.cues] == [
        (100, 500, "你好\uff0c", 0),
        (900, 1400, "世界。", 0),
        (3600, 4200, "再见", 3500),
    ]
