"""``bench.load.two_models``, tiny: both models alone and together, every point measured,
every stream of each model served by its own model (no errors), its report written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import ROOT


def test_two_models_tiny(tmp_path: Path, model_cache: Path) -> None:
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bench.load.two_models", "--size", "tiny"]
    command += ["--alone", "2", "--together", "1", "--seconds", "1.5", "--out", str(out)]
    env = {**os.environ, "ASR_MODEL_CACHE": str(model_cache)}
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "two_models.json").read_text())
    assert [point["served"] for point in report["points"]] == ["a", "b", "a+b"]
    together = report["points"][-1]["loads"]
    assert [(load["model"], load["streams"], load["errors"]) for load in together] == [
        ("a", 1, 0),
        ("b", 1, 0),
    ]
    assert set(report["start_up"]) == {"1 model", "2 models", "3 models"}
    assert "capacity, a+b, each: 1 streams" in (out / "two_models.md").read_text()
