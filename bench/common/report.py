"""The benchmarks' Markdown: a table's header, its rows, a median with its spread."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def header(*headings: str) -> list[str]:
    """A table's first two lines."""
    return [row(*headings), "|" + "---|" * len(headings)]


def row(*cells: object) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def spread(values: Sequence[float], fmt: str = ".1f") -> str:
    """The median of repeated runs and their range: ``"3.0 (2.0-4.0)"``."""
    median = statistics.median(values)
    return f"{median:{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"
