"""The settings table of ``docs/settings.md``, rendered from ``shared.settings_table.SETTINGS``.

``python -m shared.settings_readme`` rewrites the table between the two marker comments;
``tests/shared/test_settings_table.py`` fails while the page and the table disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from shared.env import render_table
from shared.settings_table import PER_MODEL, SETTINGS

PAGE = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
BEGIN = "<!-- settings:begin (generated: python -m shared.settings_readme) -->\n"
END = "<!-- settings:end -->\n"


def page_with_table(page: str) -> str:
    """``page`` with the text between the settings markers replaced by the table."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not (begin and end):
        raise ValueError(f"the settings page has no {BEGIN.strip()} ... {END.strip()} markers")
    # Blank lines around the table: Markdown reads the comments as blocks of their own.
    return head + BEGIN + "\n" + render_table(SETTINGS, PER_MODEL) + "\n" + END + tail


def main() -> int:
    """Rewrite the settings page's table from ``SETTINGS``."""
    text = PAGE.read_text(encoding="utf-8")
    PAGE.write_text(page_with_table(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
