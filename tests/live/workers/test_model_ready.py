"""A model's first start on the ONNX runtime: built, exported and its workers' mapped copies
made in one child process (``workers.models.ready``), so that torch and funasr never enter
the gateway process, and the workers find their copies made."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.fresh_process import ROOT, findings, run_script
from workers.engines.runtime.mapped_copy import MAPPED_DIR, mapped_copy
from workers.engines.runtime.onnx_files import OnnxFiles, up_to_date

FIRST_START = """
import numpy as np
from shared.settings import PoolSettings
from workers.pool import WorkerPool

async def main():
    cache = sys.argv[1]
    settings = PoolSettings(
        model="synthetic:tiny", model_cache_dir=cache, devices=("cpu", "cpu"), runtime="onnx"
    )
    async with WorkerPool(settings) as pool:
        text = await pool.transcribe(np.zeros(16000, dtype=np.int16))
    mapped = os.path.join(cache, "synthetic-streaming-tiny-seed0", "onnx-gateway", "mapped")
    report(
        served=isinstance(text, str),
        gateway_modules=sorted(m for m in ("torch", "funasr") if m in sys.modules),
        copies=sorted(name for name in os.listdir(mapped) if not name.startswith(".")),
    )

if __name__ == "__main__":
    anyio.run(main)
"""


@pytest.mark.slow
def test_a_first_start_builds_exports_and_copies_outside_the_gateway(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    found = findings(run_script(FIRST_START, tmp_path, args=[str(cache)], timeout=300))
    assert found["served"] is True
    assert found["gateway_modules"] == []
    assert [name.split("-")[0] for name in found["copies"]] == ["decoder", "encoder"]


@pytest.mark.slow
def test_the_ready_command_leaves_the_copies_the_workers_open(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "workers.models.ready", "synthetic:tiny"]
    command += ["--cache", str(tmp_path), "--engine", "paraformer-onnx", "--int8", "--mapped"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    model_dir = tmp_path / "synthetic-streaming-tiny-seed0"
    assert up_to_date(model_dir, "int8")
    graphs = OnnxFiles.of(model_dir, "int8")
    made = sorted((graphs.directory / MAPPED_DIR).glob("*/model.onnx"))
    # Of the int8 graphs alone: not of the fp32 ones the int8 calibration decodes with.
    names = [path.parent.name.rsplit("-", 1)[0] for path in made]
    assert names == ["decoder_int8", "encoder_int8"]
    before = {path: path.stat().st_mtime_ns for path in made}
    # What a worker's session opens: the copies as they are, none made again.
    assert sorted([mapped_copy(graphs.decoder), mapped_copy(graphs.encoder)]) == made
    assert {path: path.stat().st_mtime_ns for path in made} == before
