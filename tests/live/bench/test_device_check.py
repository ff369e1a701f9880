"""bench/device/check.sh's parts that run without a GPU: the records and their one table,
the marking of a stopped step, the wheel list against what our code imports, and the
fidelity step on the tiny model."""

from __future__ import annotations

import json
import re
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from bench.common import ROOT
from bench.device import check, wheels
from bench.device.fidelity import compare
from bench.device.records import (
    ANCHOR,
    JSON_FILE,
    KEYS,
    TABLE_FILE,
    Row,
    StepRecord,
    read_records,
    write_record,
    write_table,
)


def _table_rows(markdown: str) -> list[list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[1:]]


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
    # The environment is the caption; the failed step still has its row, in key order.
    assert [r[0] for r in rows] == ["3", "5", "5", "5"]
    assert "**failed**: stopped at its 130s limit" in rows[1][4]
    assert rows[2][5:] == ["10.0", "20.0", "30.0", "0"]
    assert rows[3][7] == ""  # no p99: an empty cell, not "nan"
    assert model_dir not in "".join(r[2] for r in rows)  # shown as $MODEL
    assert "`ASR_MODEL=$MODEL x`" in rows[2][2]
    caption = table.splitlines()[0]
    assert "Some GPU (1 MiB)" in caption
    assert model_dir in caption
    assert ANCHOR in caption
    saved = json.loads((out / JSON_FILE).read_text())
    assert [r["key"] for r in saved["records"]] == sorted(r.key for r in records)


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


def test_the_wheels_cover_what_the_device_must_import() -> None:
    """Each module the device must import comes from a distribution the wheels carry, and
    each of those is installed here (its version is the wheel's)."""
    carried = set(wheels.pins())
    providers = packages_distributions()
    for module in wheels.IMPORTS:
        names = {wheels.normalize(d) for d in providers.get(module, [])}
        assert names & carried, f"{module} comes from {names or 'nothing installed'}"


@pytest.mark.slow
def test_fidelity_step_compares_every_chunk(tiny_streaming_model: Path, tmp_path: Path) -> None:
    from workers.models.export.paraformer import export

    export(tiny_streaming_model, threads=1)
    argv = ["fidelity", "--work", str(tmp_path), "--model", str(tiny_streaming_model)]
    argv += ["--device", "cpu", "--streams", "3"]
    assert check.main(argv) == 0
    (record,) = (r for r in read_records(tmp_path) if r.key == "03b-fidelity-fp32")
    data = record.data
    # The same engine on the same device: every chunk equal, and every chunk counted.
    assert data["chunks"] >= 3 * 3  # chunks_of_tone: 3 chunks or more each
    assert data["tokens"] > 0
    assert (data["streams_equal"], data["chunks_equal"]) == (3, data["chunks"])
    assert data["provider"] == "CPUExecutionProvider"


def test_the_shell_numbers_the_steps_as_their_records_do() -> None:
    """check.sh's header numbers each step as the key of the record it writes: 4 and 5 for
    the gateway's placement and sweep, 6 for the table, which has no record."""
    header = (ROOT / "bench" / "device" / "check.sh").read_text().split("\nset ", 1)[0]
    numbers: dict[str, list[str]] = {}
    name = ""
    for line in header.splitlines():
        if match := re.match(r"#   ([a-z0-9-]+)?\s+(\d)  ", line):
            name = match.group(1) or name
            numbers.setdefault(name, []).append(match.group(2))
    records = {"int8": ["fidelity-int8"], "fidelity": ["fidelity-fp32"]}
    records["gateway"] = ["placement", "sweep"]
    for step, shown in numbers.items():
        keys = [KEYS[k] for k in records.get(step, [step])] if step != "table" else ["06"]
        assert shown == [key[:2].lstrip("0") or "0" for key in keys], (step, shown, keys)
    assert set(numbers) >= {"wheels", "env", "cuda-tests", "model", "gateway", "ceiling"}
