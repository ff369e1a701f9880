"""What each step of ``bench/device/check.sh`` records, and the one table made of them.

Every step writes one JSON record into the work directory (``KEY.json``; a key such as
``03b-fidelity-fp32`` sorts the table and numbers its step, 3), so that a step that fails,
times out or is skipped still leaves its row, and the table can be made from whatever is
there. The table is written once, at the end, as
Markdown ready for BENCHMARKS.md (a caption with the machine and versions, then one row per
check with the command that made it) beside one JSON of every record.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["ok", "failed", "skipped"]

PYTHON = Path(sys.executable).name  # as the rows' commands name it: python3 there

KEYS = {
    "wheels": "01-wheels",
    "cuda-tests": "02-cuda-tests",
    "model": "03a-model",
    "fidelity-fp32": "03b-fidelity-fp32",
    "fidelity-int8": "03c-fidelity-int8",
    "placement": "04-placement",
    "ceiling": "05a-ceiling",
    "sweep": "05b-sweep",
    "env": "00-env",
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


def _ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return ""
    return f"{value:.1f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def caption(records: list[StepRecord]) -> str:
    """The machine, the versions and the engine, from the ``env`` step; the anchor."""
    env_record = find(records, "env")
    env = env_record.data if env_record else {}
    gpu = env.get("gpu") or "no GPU (CPU dry run)"
    parts = [
        f"{gpu}, {env.get('cpus', '?')} CPU cores",
        f"Python {env.get('python', '?')}",
        f"torch {env.get('torch', '?')}",
        f"onnxruntime {env.get('onnxruntime', '?')}"
        f" (available: {', '.join(env.get('providers', [])) or '?'})",
        f"funasr {env.get('funasr', '?')}",
    ]
    fidelity = find(records, "fidelity-fp32")
    provider = fidelity.data.get("provider") if fidelity else None
    # What the GPU steps ran: the environment's choice, unless the export failed after it.
    ran = (fidelity.data.get("engine") if fidelity else None) or env.get("engine", "?")
    engine = f"engine {ran} on {env.get('device', '?')}"
    if provider:
        engine += f", provider {provider}"
    model_record = find(records, "model")
    model = model_record.data.get("model", "?") if model_record else "?"
    model_dir = _model_dir(records)
    if model_dir:
        model += f", `$MODEL` = `{model_dir}`"
    return (
        f"Device check ({env.get('date', '?')}): {'; '.join(parts)}. {engine}; model {model}."
        f" For comparison, {ANCHOR}."
    )


def _model_dir(records: list[StepRecord]) -> str | None:
    model_record = find(records, "model")
    value = model_record.data.get("model_dir") if model_record else None
    return str(value) if value else None


def markdown(records: list[StepRecord]) -> str:
    """The caption, then one row per check; the model's directory, in every other command,
    is shown as ``$MODEL`` (the caption says where it is)."""
    model_dir = _model_dir(records)
    lines = [
        caption(records),
        "",
        "| step | check | command | streams | result | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for record in records:
        rows = list(record.rows)
        if record.status != "ok":  # after what it measured before it stopped, if anything
            name = record.key.split("-", 1)[1]
            rows.append(Row(name, "", f"**{record.status}**: {record.note}".rstrip(": ")))
        elif record.note and rows:
            rows.append(Row(rows[-1].check, "", record.note))
        for row in rows:
            shown = row.command.replace(model_dir, "$MODEL") if model_dir else row.command
            command = f"`{shown}`" if shown else ""
            lines.append(
                f"| {step_number(record.key)} | {_cell(row.check)} | {_cell(command)}"
                f" | {'' if row.streams is None else row.streams} | {_cell(row.result)}"
                f" | {_ms(row.p50_ms)} | {_ms(row.p95_ms)} | {_ms(row.p99_ms)}"
                f" | {'' if row.errors is None else row.errors} |"
            )
    return "\n".join(lines) + "\n"


def write_table(work: Path, out: Path) -> str:
    """The Markdown table and the JSON of every record, into ``out``; the table."""
    records = read_records(work)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(records)
    (out / TABLE_FILE).write_text(table)
    payload = {"caption": caption(records), "records": [asdict(r) for r in records]}
    (out / JSON_FILE).write_text(json.dumps(payload, indent=1, default=str))
    return table
