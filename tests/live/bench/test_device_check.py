"""bench/device/check.sh's parts that run without a GPU: the records and their one table,
the marking of a stopped step, the target's line and the workers compared from recorded
sweeps, a fallback from the GPU made a failure, the step limits against the budget, the
wheels' requirements and the import check that names what is missing, and the fidelity
step on the tiny model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from bench.common import ROOT
from bench.device import check, plan, requirements
from bench.device.fidelity import compare
from bench.device.imports import unmet_requirements
from bench.device.machine import probe_imports, unproven_on_gpu
from bench.device.placement import STAND_IN, placement, provider_verdict
from bench.device.records import (
    ANCHOR,
    JSON_FILE,
    KEYS,
    TABLE_FILE,
    Row,
    StepRecord,
    read_records,
    write_record,
)
from bench.device.table import with_derived, write_table
from bench.device.target import streams_at_target, target_record, workers_record


def _table_rows(markdown: str) -> list[list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[1:]]


def _summary(streams: int, p99: float, errors: int = 0) -> Any:
    """What bench.load.ws_load's JSON report says of a level, as far as the target reads it."""
    chunk = {"p50": p99 / 3, "p95": p99 / 2, "p99": p99}
    done = streams - errors
    return {"completed": done, "errors": errors, "refused": 0, "chunk_latency_ms": chunk}


def _level(streams: int, p99: float, **kwargs: Any) -> dict[str, Any]:
    return {"streams": streams, "summary": _summary(streams, p99, **kwargs), "problem": ""}


def _gateway_records(
    levels: list[dict[str, Any]], suffix: str = "", gpu_mib: float | None = 1000.0
) -> list[StepRecord]:
    workers = 1 if suffix else 2
    placed = [{"gpu_mib": gpu_mib, "rss_mib": 500.0} for _ in range(workers)]
    return [
        StepRecord(KEYS[f"placement{suffix}"], "ok", 1.0, data={"at_ready": placed}),
        StepRecord(KEYS[f"sweep{suffix}"], "ok", 1.0, data={"levels": levels}),
    ]


def test_the_table_has_a_row_per_check_and_says_what_did_not_run(tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    model_dir = "/tmp/models/synthetic-streaming-large-seed0"
    records = [
        StepRecord("00-env", "ok", 1.0, data={"gpu": "Some GPU (1 MiB)", "engine": "e"}),
        StepRecord(
            "03a-model",
            "ok",
            2.0,
            [Row("model", f"python -m workers.models.synthetic {model_dir}", "built")],
            {"model_dir": model_dir, "model": "synthetic streaming large"},
        ),
        StepRecord(
            "05b-sweep",
            "ok",
            3.0,
            [
                Row("gateway", f"ASR_MODEL={model_dir} x", "fine", 50, 10.0, 20.0, 30.0, 0),
                Row("gateway", "y", "slow", 100, 100.0, 200.0, float("nan"), 2),
            ],
        ),
        StepRecord("05a-ceiling", "failed", 4.0, note="stopped at its 130s limit"),
    ]
    for record in records:
        write_record(work, record)
    table = write_table(work, out)
    assert (out / TABLE_FILE).read_text() == table
    rows = _table_rows(table)
    # The environment is the caption; the failed step still has its row, in key order; the
    # target and the workers compared cannot be had without a placement: two failed rows.
    assert [r[0] for r in rows] == ["3", "5", "5", "5", "6", "6"]
    assert "**failed**: stopped at its 130s limit" in rows[1][4]
    assert rows[2][5:] == ["10.0", "20.0", "30.0", "0"]
    assert rows[3][7] == ""  # no p99: an empty cell, not "nan"
    assert rows[4][1].startswith("target: streams per GPU at p99 ≤ 463 ms")
    assert rows[4][4] == "**failed**: the gateway step did not run"
    assert model_dir not in "".join(r[2] for r in rows)  # shown as $MODEL
    assert "`ASR_MODEL=$MODEL x`" in rows[2][2]
    caption = table.splitlines()[0]
    assert "Some GPU (1 MiB)" in caption
    assert model_dir in caption
    assert ANCHOR in caption
    saved = json.loads((out / JSON_FILE).read_text())
    keys = sorted([*(r.key for r in records), KEYS["target"], KEYS["workers"]])
    assert [r["key"] for r in saved["records"]] == keys


def test_a_stopped_step_keeps_the_rows_it_wrote(tmp_path: Path) -> None:
    row = Row("gateway", "cmd", "measured", 50)
    write_record(tmp_path, StepRecord("05b-sweep", "ok", 9.0, [row], {"levels": [1]}))
    note = "stopped at its 200s limit"
    check.main(["fail", "--work", str(tmp_path), "--for", "sweep", "--note", note])
    check.main(["fail", "--work", str(tmp_path), "--for", "ceiling", "--status", "skipped"])
    saved = {r.key: r for r in read_records(tmp_path)}
    sweep, ceiling = saved["05b-sweep"], saved["05a-ceiling"]
    assert (sweep.status, sweep.note) == ("failed", note)
    assert (sweep.rows, sweep.data) == ([row], {"levels": [1]})
    assert (ceiling.status, ceiling.rows) == ("skipped", [])


def test_compare_counts_equal_chunks_and_whole_streams() -> None:
    reference = [["a", "b", "c"], ["d"], ["e", "f"]]
    ours = [["a", "x", "c"], ["d"], ["e"]]  # one chunk differs; one stream is a chunk short
    assert compare(ours, reference) == (1, 4, 6)
    assert compare(reference, reference) == (3, 6, 6)


# -- the target: N streams per GPU at p99 ≤ 463 ms -----------------------------------------


def test_the_target_is_the_highest_level_below_the_first_that_missed() -> None:
    warmup = {"warmup": True, "streams": 64, "summary": _summary(64, 2000.0)}
    # As the sweep records them: the levels, then the halfway level that narrowed the answer.
    levels = [warmup, _level(100, 120.0), _level(200, 300.0), _level(400, 900.0)]
    levels.append(_level(300, 450.0))
    target = streams_at_target(levels)
    assert target is not None
    assert (target.streams, target.missed) == (300, 400)
    assert target.line == "300 streams per GPU at p99 ≤ 463 ms"
    assert target.missed_why == "p99 900 ms"
    # 463 ms itself meets it; a failed stream misses it, whatever the latency.
    exact = streams_at_target([_level(100, 463.0), _level(200, 100.0, errors=1)])
    assert exact is not None
    assert (exact.streams, exact.missed, exact.missed_why) == (100, 200, "1 of 200 streams failed")
    # A level past the first miss does not count (a refusal there is no capacity).
    after_a_miss = streams_at_target([_level(100, 500.0), _level(200, 400.0)])
    assert after_a_miss is not None
    assert (after_a_miss.streams, after_a_miss.missed) == (0, 100)
    timed_out = {"streams": 100, "summary": None, "problem": "timed out"}
    none_met = streams_at_target([timed_out])
    assert none_met is not None
    assert (none_met.streams, none_met.missed_why) == (0, "timed out")
    assert streams_at_target([warmup]) is None


def test_the_target_line_and_the_workers_row_come_from_the_recorded_sweeps(tmp_path: Path) -> None:
    env = StepRecord(KEYS["env"], "ok", 1.0, data={"gpu": "H100", "engine": "paraformer-onnx"})
    two = _gateway_records([_level(100, 100.0), _level(200, 200.0), _level(400, 700.0)])
    one = _gateway_records([_level(100, 300.0), _level(200, 800.0)], suffix="-1")
    for record in (env, *two, *one):
        write_record(tmp_path, record)
    table = write_table(tmp_path, tmp_path / "out")
    assert "Target: **200 streams per GPU at p99 ≤ 463 ms** (400 streams did not" in table
    records = with_derived(read_records(tmp_path))
    target = next(r for r in records if r.key == KEYS["target"])
    assert (target.status, target.rows[0].streams, target.rows[0].p99_ms) == ("ok", 200, 200.0)
    compared = next(r for r in records if r.key == KEYS["workers"])
    assert compared.status == "ok"
    assert compared.data == {"streams": [100, 200], "gpu_mib": [1000.0, 2000.0]}
    assert "2 workers: 200 streams, GPU memory 2000 MiB (1000 + 1000)" in compared.rows[0].result
    assert "two serve 2.00x the streams of one for 2.00x the GPU memory" in compared.rows[0].result
    # The check exits 1 where a row failed: none here.
    assert check.main(["table", "--work", str(tmp_path), "--out", str(tmp_path / "out")]) == 0


# -- a fallback from the GPU is a failure ---------------------------------------------------


@pytest.mark.parametrize(
    ("device", "runtime", "provider", "dry_run", "verdict"),
    [
        ("cuda:0", "onnx", "CUDAExecutionProvider", False, True),
        ("cuda:0", "torch", "torch-cuda", False, True),
        # onnxruntime on its CPU provider behind a GPU's label: the quiet fallback.
        ("cuda:0", "onnx", "CPUExecutionProvider", False, False),
        ("cuda:0", "onnx", "CUDAExecutionProvider+CPUExecutionProvider", False, False),
        # The ONNX runtime asked for and PyTorch's serving: a fallback too, on the GPU or not.
        ("cuda:0", "onnx", "torch-cuda", False, False),
        ("cuda:0", "onnx", "CPUExecutionProvider", True, False),  # a dry run asks for cpu
        ("cpu", "onnx", "CPUExecutionProvider", False, False),
        ("cpu", "onnx", "CPUExecutionProvider", True, True),
        ("cuda:0", "onnx", None, False, None),  # an older gateway says nothing
    ],
)
def test_a_worker_counts_as_on_the_gpu_only_on_its_runtimes_cuda_provider(
    device: str, runtime: str, provider: str | None, dry_run: bool, verdict: bool | None
) -> None:
    ok, said = provider_verdict(device, runtime, provider, dry_run)
    assert ok is verdict
    assert (STAND_IN in said) == (device == "cpu" and bool(verdict))


def test_a_placement_on_the_cpu_is_no_gpu_figure(tmp_path: Path) -> None:
    """A worker on the CPU fails the placement (its readyz entry as the gateway gives it),
    and the target then says there is no GPU figure rather than sweeping the CPU's."""
    worker = {"index": 0, "device": "cuda:0", "state": "ready", "pid": None}
    worker |= {"provider": "CPUExecutionProvider", "gpu_memory_bytes": None}
    (placed,) = placement([worker], "cuda:0", "onnx", dry_run=False)
    assert placed["provider_ok"] is False
    assert placed["provider_said"] == "asked for onnx on cuda:0, runs on CPUExecutionProvider"
    note = f"{placed['provider_said']}"
    failed = StepRecord(KEYS["placement"], "failed", 1.0, data={"at_ready": [placed]}, note=note)
    sweep = StepRecord(KEYS["sweep"], "failed", 0.0, note="not run")
    target = target_record([failed, sweep])
    assert target.status == "failed"
    assert target.note == f"not a GPU figure: {note}"


def test_an_engine_that_fell_back_to_pytorch_gives_a_failed_target() -> None:
    fallback = "onnxruntime's CUDA provider does not run here (fell back to CPU)"
    env = StepRecord(KEYS["env"], "failed", 1.0, data={"fallback": fallback})
    records = [env, *_gateway_records([_level(20, 100.0), _level(40, 600.0)])]
    target = target_record(records)
    assert target.status == "failed"
    assert target.note == f"the PyTorch engine's figure, a fallback: {fallback}"
    assert "20 streams per GPU" in target.rows[0].result  # still shown, as what it is
    assert workers_record(records).status == "failed"


@pytest.mark.slow
def test_the_env_step_fails_when_the_onnx_engine_cannot_run_on_the_gpu(tmp_path: Path) -> None:
    """Here, onnxruntime is the CPU build: asked for cuda:0, the env step picks PyTorch's
    engine for the steps after it, and its own row fails."""
    assert check.main(["env", "--work", str(tmp_path), "--device", "cuda:0"]) == 1
    (record,) = read_records(tmp_path)
    assert record.status == "failed"
    assert record.note.startswith("the ONNX engine cannot run on cuda:0: ")
    assert (tmp_path / "engine").read_text() == "paraformer"


def test_a_gpu_test_that_skips_on_the_gpu_machine_proves_nothing() -> None:
    outcomes = [
        ("test_on_the_gpu", "skipped", "CUDA is not available"),
        ("test_refusal", "skipped", "checks the refusal without CUDA"),
        ("test_passes", "passed", ""),
        ("test_breaks", "failure", "assert False"),
    ]
    assert unproven_on_gpu(outcomes) == [
        "test_on_the_gpu: skipped (CUDA is not available)",
        "test_breaks: failure (assert False)",
    ]


# -- the limits and the budget ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["device", "dry"])
def test_the_step_limits_add_up_to_less_than_the_budget(mode: plan.Mode) -> None:
    assert plan.planned_seconds(mode) <= plan.budget(mode)
    assert all(step.limit(mode) >= 15 for step in plan.STEPS)  # none too short to start
    # The shell's limits are the plan's, every step's.
    shell = (ROOT / "bench" / "device" / "check.sh").read_text()
    assert '$PY -m bench.device.plan shell "$MODE"' in shell
    shown = " ".join(f"${{LIMIT[{step.name}]}}" for step in plan.STEPS)
    script = f'eval "$({sys.executable} -m bench.device.plan shell {mode})"; echo {shown}'
    said = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert said.stdout.split() == [str(step.limit(mode)) for step in plan.STEPS]


def test_the_device_run_fits_in_one_lend() -> None:
    """A lend is 15 minutes with the machine's start (minutes): the run under 8 minutes,
    and with room to run one step again."""
    assert plan.planned_seconds("device") <= 8 * 60 - 30
    longest = max(step.device_s for step in plan.default_steps())
    assert plan.planned_seconds("device") + longest <= 10 * 60  # one command's limit


# -- the wheels and the import check -------------------------------------------------------


def _fake_wheel(directory: Path, name: str, version: str, requires: list[str]) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {line}\n" for line in requires)
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return path


def test_the_closure_names_a_requirement_no_wheel_meets(tmp_path: Path) -> None:
    needs = ["beta>=1", "numpy>=1.26", "jieba", "gamma; python_version < '3.12'"]
    alpha = _fake_wheel(tmp_path, "alpha", "1.0", needs)
    root = [Requirement("alpha")]
    found = requirements.closure(root, requirements.in_wheels([alpha]))
    # numpy is the machine's, jieba left out on purpose, gamma not for Python 3.12.
    assert found.unresolved == ["beta (required by alpha)"]
    assert (found.provided, found.left_out) == ({"numpy"}, {"jieba"})
    beta = _fake_wheel(tmp_path, "beta", "2.0", [])
    found = requirements.closure(root, requirements.in_wheels([alpha, beta]))
    assert (found.unresolved, found.carried) == ([], {"alpha": "1.0", "beta": "2.0"})


def test_what_the_device_must_import_is_carried_or_the_machines() -> None:
    """Every requirement is installed here (the versions we carry), and each third-party
    module the device must import comes from a carried distribution or the machine's."""
    from importlib.metadata import packages_distributions

    found = requirements.closure(requirements.roots(), requirements.installed)
    assert found.unresolved == []
    assert {"funasr", "omegaconf", "kaldi-native-fbank", "onnx", "starlette"} <= set(found.carried)
    assert {"pytest", "pytest-xdist", "pytest-timeout"} <= set(found.carried)
    assert not set(found.carried) & (requirements.MACHINE_HAS | set(requirements.NOT_IMPORTED))
    ours = {"gateway", "workers", "bench", "shared"}
    providers = packages_distributions()
    for module in requirements.IMPORTS:
        top = module.split(".")[0]
        if top in ours:
            continue
        names = {requirements.normalize(d) for d in providers.get(top, [])}
        assert names & (set(found.carried) | requirements.MACHINE_HAS), (module, names)


def test_the_import_check_names_the_module_that_does_not_import(tmp_path: Path) -> None:
    """A package whose __init__ swallows its submodules' import errors (as funasr's does)
    imports; the submodule, named, fails and says what it lacks."""
    package = tmp_path / "swallower"
    package.mkdir()
    swallowing = "try:\n    from . import model\nexcept ImportError:\n    pass\n"
    (package / "__init__.py").write_text(swallowing)
    (package / "model.py").write_text("import no_such_dependency_of_ours\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    modules = ("json", "swallower", "swallower.model", "no_such_module_of_ours")
    probed = probe_imports(modules, ["asr-gateway"], env)
    assert probed["failed_imports"] == [
        "swallower.model: ModuleNotFoundError: No module named 'no_such_dependency_of_ours'",
        "no_such_module_of_ours: ModuleNotFoundError: No module named 'no_such_module_of_ours'",
    ]
    assert probed["unmet"] == []  # our own requirements, installed here


def test_the_requirement_check_names_what_is_absent() -> None:
    assert unmet_requirements(["no-such-distribution-of-ours"]) == [
        "no-such-distribution-of-ours: not installed"
    ]


@pytest.mark.slow
def test_fidelity_step_compares_every_chunk(tiny_streaming_model: Path, tmp_path: Path) -> None:
    from workers.models.export.paraformer import export

    export(tiny_streaming_model, threads=1)
    argv = ["fidelity", "--work", str(tmp_path), "--model", str(tiny_streaming_model)]
    argv += ["--device", "cpu", "--streams", "3", "--dry-run"]
    assert check.main(argv) == 0
    (record,) = (r for r in read_records(tmp_path) if r.key == "03b-fidelity-fp32")
    data = record.data
    # The same engine on the same device: every chunk equal, and every chunk counted.
    assert data["chunks"] >= 3 * 3  # chunks_of_tone: 3 chunks or more each
    assert data["tokens"] > 0
    assert (data["streams_equal"], data["chunks_equal"]) == (3, data["chunks"])
    assert data["provider"] == "CPUExecutionProvider"
    assert record.rows[0].result.endswith(STAND_IN)


def test_the_shell_numbers_the_steps_as_their_records_do() -> None:
    """check.sh's header numbers each step as the key of the record it writes: 4 and 5 for
    each gateway run's placement and sweep, 6 for the table, whose rows are derived; and it
    lists every step of the plan."""
    header = (ROOT / "bench" / "device" / "check.sh").read_text().split("\nset ", 1)[0]
    numbers: dict[str, list[str]] = {}
    name = ""
    for line in header.splitlines():
        if match := re.match(r"#   ([a-z0-9-]+)?\s+(\d)  ", line):
            name = match.group(1) or name
            numbers.setdefault(name, []).append(match.group(2))
    records = {"int8": ["fidelity-int8"], "fidelity": ["fidelity-fp32"]}
    records["gateway"] = ["placement", "sweep"]
    records["gateway-1"] = ["placement-1", "sweep-1"]
    records["table"] = ["target", "workers"]
    for step, shown in numbers.items():
        keys = [KEYS[k] for k in records.get(step, [step])]
        assert sorted(set(shown)) == sorted({key[:2].lstrip("0") or "0" for key in keys}), step
    assert set(numbers) == {step.name for step in plan.STEPS} | {"table"}
