"""gateway.whole.long_audio's pure parts: sentences moved to the file's start, and
segments' transcripts joined with their sentences in order."""

from __future__ import annotations

from gateway.whole.long_audio import DecodedSegment, join_segments, moved
from shared.messages import Decoded, SentenceStamp, SpeechTags

FIRST = SentenceStamp("你 好", "\uff0c", 100, 500, ((100, 300), (300, 500)))


def test_a_sentence_moved_keeps_its_text_and_moves_every_time() -> None:
    assert moved(FIRST, 2000) == SentenceStamp(
        "你 好", "\uff0c", 2100, 2500, ((2100, 2300), (2300, 2500))
    )


def test_joined_segments_keep_their_sentences_in_order() -> None:
    second = moved(SentenceStamp("世 界", "。", 40, 200, ((40, 90), (90, 200))), 3000)
    pieces = [
        DecodedSegment(
            0, 0, 3000, Decoded("你好\uff0c", ((100, 300), (300, 500)), sentences=(FIRST,))
        ),
        DecodedSegment(1, 3000, 3200, Decoded("")),  # silence
        DecodedSegment(
            2,
            3000,
            4000,
            Decoded(
                "世界。", ((3040, 3090), (3090, 3200)), sentences=(second,), tags=SpeechTags("zh")
            ),
        ),
    ]
    joined = join_segments(pieces)
    assert joined == Decoded(
        "你好\uff0c 世界。",
        ((100, 300), (300, 500), (3040, 3090), (3090, 3200)),
        sentences=(FIRST, second),
        tags=SpeechTags("zh"),
    )


def test_a_file_without_token_times_has_no_sentences() -> None:
    joined = join_segments([DecodedSegment(0, 0, 1000, Decoded("1600:abc"))])
    assert (joined.timestamps, joined.sentences) == ((), ())
