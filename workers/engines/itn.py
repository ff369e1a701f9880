"""Inverse text normalization of offline results: "一百二十三" as "123", "百分之五十" as "50%".

FunASR's C++ servers run WeTextProcessing's Chinese ITN FSTs on their offline and 2pass
offline results when the client's config says ``itn`` (its default). ``wetext`` runs the
same FSTs without pynini (``kaldifst``), from files inside its wheel: nothing to download.
It runs here, in the offline worker after the punctuation, as the C++ server orders them,
so that it never costs the gateway's event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workers.engines.table import engine_error


class InverseNormalizer:
    """WeTextProcessing's Chinese ITN, loaded on first use (about 0.25 s)."""

    def __init__(self) -> None:
        self._normalizer: Any = None

    def load(self) -> None:
        if self._normalizer is None:
            from wetext import Normalizer

            self._normalizer = Normalizer(lang="zh", operator="itn")

    def normalize(self, texts: Sequence[str]) -> list[tuple[str, str | None]]:
        """Each text normalized, or kept with the error that stopped it."""
        self.load()
        results: list[tuple[str, str | None]] = []
        for text in texts:
            try:
                results.append((str(self._normalizer.normalize(text)), None))
            except Exception as exc:  # a bad FST path fails its own text only
                results.append((text, engine_error(exc)))
        return results
