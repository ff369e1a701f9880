"""The README's settings table, rendered from ``shared.settings_table.SETTINGS``.

``python -m shared.settings_readme`` rewrites the table between the two marker comments;
``tests/shared/test_settings_table.py`` fails while the README and the table disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from shared.env import render_table
from shared.settings_table import SETTINGS

README = Path(__file__).resolve().parents[1] / "README.md"
BEGIN = "<!-- settings:begin (generated: python -m shared.settings_readme) -->\n"
END = "<!-- settings:end -->\n"


def readme_with_table(readme: str) -> str:
    """``readme`` with the text between the settings markers replaced by the table."""
    head, begin, rest = readme.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not (begin and end):
        raise ValueError(f"the README has no {BEGIN.strip()} ... {END.strip()} markers")
    # Blank lines around the table: Markdown reads the comments as blocks of their own.
    return head + BEGIN + "\n" + render_table(SETTINGS) + "\n" + END + tail


def main() -> int:
    """Rewrite the README's settings table from ``SETTINGS``."""
    text = README.read_text(encoding="utf-8")
    README.write_text(readme_with_table(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
