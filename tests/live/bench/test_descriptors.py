"""bench.reliability.descriptors' tiny run: the table full for 1 s, then the server serving
again."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)"),
]

REPOSITORY = Path(__file__).resolve().parents[3]


def test_a_tiny_table_run_sees_the_server_recover() -> None:
    command = [sys.executable, "-m", "bench.reliability.descriptors", "table"]
    command += ["--loop", "uvloop", "--nofile", "256", "--hold", "1"]
    done = subprocess.run(
        command, cwd=REPOSITORY, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert isinstance(result["new_readyz_200_s"], float), result
    assert result["agent_after"].startswith("ready up"), result
    assert result["healthz_after"] == result["readyz_after"] == 200, result
