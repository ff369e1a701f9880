"""The pool's library example (docs/workers.md) runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- readme-example: tested by tests/live/test_readme.py -->"
PAGE = ROOT / "docs" / "workers.md"


def _example() -> str:
    after = PAGE.read_text().split(MARKER, 1)[1]
    match = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert match is not None, "the example block is missing"
    return match.group(1)


def test_readme_example_runs(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(_example())
    completed = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    silence_crc = "16000:"
    assert lines[0].startswith("transcribe: " + silence_crc)
    assert [line.split()[0] for line in lines[1:]] == ["partial", "partial", "final"]
    assert lines[-1].startswith("final " + silence_crc)
