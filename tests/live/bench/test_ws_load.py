"""The load generator against a real gateway: it measures and verifies what it claims."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from bench.common.gateway import Gateway, serve
from bench.common.stats import distribution
from bench.load.sweep import markdown, parse_config
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]


async def run_ws_load(server: Gateway, tmp_path: Path, *args: str) -> dict[str, Any]:
    """``python -m bench.load.ws_load`` against ``server`` with ``args``, verifying checksums;
    its JSON summary. The generator must exit 0 (no stream failed)."""
    report = tmp_path / "load.json"
    command = [sys.executable, "-m", "bench.load.ws_load", "--url", server.url, *args]
    command += ["--verify", "--quiet", "--json", str(report)]
    with within(60):
        completed = await anyio.run_process(
            command, cwd=ROOT, check=False, stdin=subprocess.DEVNULL
        )
    assert completed.returncode == 0, completed.stdout.decode() + completed.stderr.decode()
    summary: dict[str, Any] = json.loads(report.read_text())["summary"]
    return summary


async def test_ws_load_verifies_every_stream(tmp_path: Path) -> None:
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu"}
    async with serve(env, tmp_path / "server.log") as server:
        summary = await run_ws_load(
            server, tmp_path, "--streams", "4", "--seconds", "1.5", "--ramp", "0.2"
        )
    assert (summary["completed"], summary["verified"], summary["errors"]) == (4, 4, 0)
    # 1.5 s of audio is two whole 600 ms chunks per stream, each timed by its seq.
    assert summary["chunk_latency_ms"]["count"] == 8
    assert summary["first_partial_ms"]["count"] == 4
    assert summary["server_queue_ms"]["count"] == 8  # each chunk's: two per stream


@pytest.mark.slow
@pytest.mark.parametrize("sentence_ends", ["energy", "vad"])
async def test_ws_load_2pass_verifies_the_sentence_partition(
    tmp_path: Path, sentence_ends: str, model_cache: Path, tiny_vad_model: Path
) -> None:
    """9 s of speech with two 1.2 s pauses: three sentences per stream, by the energy
    endpointer or the FSMN-VAD pool, and every byte in exactly one sentence."""
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_MODEL_CACHE": str(model_cache)}
    if sentence_ends == "vad":
        env["ASR_VAD_MODEL"] = str(tiny_vad_model)
    async with serve(env, tmp_path / "server.log") as server:
        summary = await run_ws_load(
            server,
            tmp_path,
            "--mode",
            "2pass",
            "--streams",
            "3",
            "--seconds",
            "9",
            "--fast",
            "--ramp",
            "0.2",
        )
    assert (summary["completed"], summary["verified"], summary["errors"]) == (3, 3, 0)
    assert summary["sentences"] == 3 * 3
    # Each sentence's streaming pass says where its chunks' audio ends: 15 chunks of
    # audio per stream, less at most one per sentence (its rest is a final piece).
    assert 3 * (15 - 3) <= summary["chunk_latency_ms"]["count"] <= 3 * 15
    assert summary["chunk_latency_ms"]["p50"] >= 0
    assert summary["first_partial_ms"]["count"] == 3


def test_distribution_percentiles() -> None:
    d = distribution([float(v) for v in range(1, 101)])
    assert (d.count, d.max) == (100, 100.0)
    assert d.p50 == pytest.approx(50.5)
    assert d.p99 == pytest.approx(99.01)
    assert distribution([]).count == 0


def test_run_config_parsing() -> None:
    config = parse_config("shm:ASR_MODEL=checksum;ASR_DEVICES=cpu,cpu")
    assert config.name == "shm"
    assert config.env == {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu"}
    assert config.checkout is None


def test_a_config_may_name_the_checkout_it_is_served_from(tmp_path: Path) -> None:
    config = parse_config(f"before@{tmp_path}:ASR_MODEL=checksum")
    assert config.name == "before"
    assert config.checkout == tmp_path.resolve()
    assert config.env == {"ASR_MODEL": "checksum"}


def test_markdown_reports_median_and_spread() -> None:
    from bench.load.sweep import Point

    points = [
        Point("shm", 10, r, 10, 0, 0, 10, 1.0, p95, 3.0, 2.0, 1.0, 100.0, 36.0, 0.5, 9.0)
        for r, p95 in enumerate([2.0, 4.0, 3.0])
    ]
    table = markdown(points)
    assert "| shm | 10 | 3 | 0 |" in table
    assert "3.0 (2.0-4.0)" in table


def test_the_event_loops_share_and_cost_per_frame() -> None:
    from bench.load.sweep import Point

    point = Point(
        "a",
        1,
        0,
        1,
        0,
        0,
        None,
        1.0,
        2.0,
        3.0,
        2.0,
        1.0,
        100.0,
        0.1,
        0.5,
        9.0,
        event_loop_cpu_s=0.5,
        frames=1000,
    )
    assert point.event_loop_share == 0.5
    assert point.event_loop_us_per_frame == 500.0
    assert "| 0.50 (0.50-0.50) | 500 (500-500) |" in markdown([point])


def test_the_send_log_gives_the_send_time_of_the_frame_that_carried_a_byte() -> None:
    from bench.load.ws_stream import SendLog

    log = SendLog()
    for frame, at in enumerate([1.0, 2.0, 3.0]):
        log.record((frame + 1) * 1920, at)
    assert log.time_of(1920) == 1.0  # the first frame's last byte
    assert log.time_of(1921) == 2.0  # the second frame's first byte
    assert log.time_of(3 * 1920) == 3.0
    assert log.time_of(3 * 1920 + 1) is None  # not sent yet


def test_the_design_names_the_load_generator_bench_ws_load_py(tmp_path: Path) -> None:
    """``python bench/ws_load.py`` runs the generator, from any directory."""
    script = Path(__file__).resolve().parents[3] / "bench" / "ws_load.py"
    done = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "--streams" in done.stdout
