"""No module of ours grows past what one concept needs: at most ``MAX_LINES`` lines, a
module past it is asking to be cut where its parts meet. Two are let be: funasr's VAD state
machine, kept diffable against funasr's, and the settings table, which is data."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450
PACKAGES = ("shared", "gateway", "workers", "bench", "tests")
EXCEPTIONS = {
    Path("shared/settings_table.py"),
}
VENDORED = Path("tests/live/clients/vendor")  # FunASR's own clients, byte for byte


def test_no_module_is_over_the_limit() -> None:
    over = {
        str(path.relative_to(ROOT)): lines
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.relative_to(ROOT) not in EXCEPTIONS
        and VENDORED not in path.relative_to(ROOT).parents
        and (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert over == {}
