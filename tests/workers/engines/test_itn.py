"""WeTextProcessing's Chinese ITN as the offline workers run it, on the C++ server's own
examples: what ITN must produce is known for these texts."""

from __future__ import annotations

import pytest

from workers.engines.itn import InverseNormalizer

ITN = InverseNormalizer()


@pytest.mark.parametrize(
    ("spoken", "written"),
    [
        ("一百二十三", "123"),
        ("百分之五十", "50%"),
        ("今天是二零二四年三月五日", "今天是2024/03/05"),
        ("阿里巴巴达摩院", "阿里巴巴达摩院"),  # nothing to normalize
    ],
)
def test_spoken_numbers_are_written_as_digits(spoken: str, written: str) -> None:
    assert ITN.normalize([spoken]) == [(written, None)]


def test_a_text_that_fails_keeps_its_text_and_says_why() -> None:
    class Broken:
        def normalize(self, text: str) -> str:
            raise RuntimeError("a bad FST path")

    itn = InverseNormalizer()
    itn._normalizer = Broken()
    ((text, error),) = itn.normalize(["一百"])
    assert text == "一百"
    assert error == "engine error: RuntimeError: a bad FST path"
