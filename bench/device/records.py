"""What each step of ``bench/device/check.sh`` records.

Every step writes one JSON record into the work directory (``KEY.json``; a key such as
``03b-fidelity-fp32`` sorts the table and numbers its step, 3), so that a step that fails,
times out or is skipped still leaves its row, and the table (``bench.device.table``) can be
made from whatever is there, also by a later call on the same machine after one step ran
again.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "failed", "skipped"]

PYTHON = Path(sys.executable).name  # as the rows' commands name it: python3 there

KEYS = {
    "env": "00-env",
    "wheels": "01-wheels",
    "cuda-tests": "02-cuda-tests",
    "model": "03a-model",
    "fidelity-fp32": "03b-fidelity-fp32",
    "fidelity-int8": "03c-fidelity-int8",
    "placement": "04a-placement",  # the gateway step: two workers on the GPU
    "placement-1": "04b-placement-1",  # gateway-1: one worker
    "ceiling": "05a-ceiling",
    "sweep": "05b-sweep",
    "sweep-1": "05c-sweep-1",
    # Not written by a step: the table computes them from the sweeps (bench.device.target).
    "target": "06a-target",
    "workers": "06b-workers",
}

# FunASR's own GPU figure, the one to compare with (its Triton recipe's README).
ANCHOR = "FunASR's Triton recipe: 100 streams on one A10, p99 463 ms"
TABLE_FILE = "device_check.md"
JSON_FILE = "device_check.json"


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table."""

    check: str
    command: str
    result: str
    streams: int | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    errors: int | None = None


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What one step measured: its rows, and the raw data behind them."""

    key: str  # "NNx-name": sorts the table; NN is the step's number in it
    status: Status
    seconds: float
    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def write_record(work: Path, record: StepRecord) -> Path:
    """Write (or overwrite: steps write again as they go) the step's record."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{record.key}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(asdict(record), indent=1, default=str))
    partial.replace(path)
    return path


def read_records(work: Path) -> list[StepRecord]:
    records = []
    for path in sorted(work.glob("[0-9][0-9]*-*.json")):
        raw = json.loads(path.read_text())
        rows = [Row(**row) for row in raw.pop("rows")]
        records.append(StepRecord(rows=rows, **raw))
    return sorted(records, key=lambda r: r.key)


def step_number(key: str) -> int:
    return int(key[:2])


def find(records: list[StepRecord], name: str) -> StepRecord | None:
    """The record whose key names ``name`` (``fidelity-fp32`` in ``03b-fidelity-fp32``)."""
    return next((r for r in records if r.key.split("-", 1)[1] == name), None)
