"""Our sentences against funasr's own split (``timestamp_sentence``, what its pipeline
gives as ``sentence_info``): the same tokens, times and punctuation in each sentence, for
texts punctuated as the CT-Transformer punctuates them (a mark after a token, by id)."""

from __future__ import annotations

import random

import pytest
from funasr.utils.timestamp_tools import timestamp_sentence

from workers.engines.sentences import stamp_sentences

# funasr's punctuation ids: 1 none, then comma, full stop, question mark, enumeration comma.
MARKS = {2: "\uff0c", 3: "\u3002", 4: "\uff1f", 5: "\u3001"}


@pytest.mark.parametrize("seed", range(20))
def test_the_sentences_are_funasrs(seed: int) -> None:
    rng = random.Random(seed)
    tokens = [chr(0x4E00 + rng.randrange(300)) for _ in range(rng.randrange(1, 40))]
    ids = [rng.choice([1, 1, 1, 2, 3, 4, 5]) for _ in tokens]
    ids[-1] = 3  # the CT-Transformer closes a text with a full stop
    times = [(i * 60, i * 60 + 50) for i in range(len(tokens))]
    text = "".join(token + MARKS.get(punc, "") for token, punc in zip(tokens, ids, strict=True))
    theirs = timestamp_sentence(ids, times, " ".join(tokens), return_raw_text=True)
    ours = stamp_sentences(text, times)
    # Tokens as the C++ server's text_seg writes them, space-separated; funasr's Python
    # raw_text runs CJK characters together.
    assert [(s.text_seg.replace(" ", ""), s.start, s.end, list(s.ts_list)) for s in ours] == [
        (s["raw_text"].replace(" ", ""), s["start"], s["end"], s["timestamp"]) for s in theirs
    ]
    assert [s.punc for s in ours] == [s["text"][-1] for s in theirs]
