"""The one table of ``bench/device/check.sh``: Markdown ready for BENCHMARKS.md (a caption
with the machine and versions, one row per check with the command that made it, and the
target's line under it) beside one JSON of every record. Made from whatever records the
work directory holds, after every step (a call stopped at its limit still brings back what
was measured), and with the rows the sweeps imply (``bench.device.target``).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from bench.device.records import (
    ANCHOR,
    JSON_FILE,
    TABLE_FILE,
    Row,
    StepRecord,
    find,
    read_records,
    step_number,
)
from bench.device.target import target_record, workers_record


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
    gpu = env.get("gpu") or ("no GPU (CPU dry run)" if env.get("dry_run") else "no GPU found")
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
    dry = " A dry run: the CPU stands in for the GPU." if env.get("dry_run") else ""
    return (
        f"Device check ({env.get('date', '?')}): {'; '.join(parts)}. {engine}; model {model}."
        f" For comparison, {ANCHOR}.{dry}"
    )


def _model_dir(records: list[StepRecord]) -> str | None:
    model_record = find(records, "model")
    value = model_record.data.get("model_dir") if model_record else None
    return str(value) if value else None


def with_derived(records: list[StepRecord]) -> list[StepRecord]:
    """The steps' records, then the target's and the workers' comparison, made from them."""
    return [*records, target_record(records), workers_record(records)]


def markdown(records: list[StepRecord]) -> str:
    """The caption, then one row per check (a record that is not ok adds a row saying so),
    then the target's line; the model's directory, in every other command, is shown as
    ``$MODEL`` (the caption says where it is)."""
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
            if rows and not (rows[-1].command or rows[-1].result):  # a label, nothing else
                name = rows.pop().check
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
    target = find(records, "target")
    if target is not None:
        said = target.rows[0].result if target.rows else ""
        verdict = "" if target.status == "ok" else f"**{target.status}**: {target.note}"
        lines += ["", " ".join(part for part in ("Target:", said, verdict) if part)]
    return "\n".join(lines) + "\n"


def write_table(work: Path, out: Path) -> str:
    """The Markdown table and the JSON of every record, into ``out``; the table."""
    records = with_derived(read_records(work))
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(records)
    (out / TABLE_FILE).write_text(table)
    payload = {"caption": caption(records), "records": [asdict(r) for r in records]}
    (out / JSON_FILE).write_text(json.dumps(payload, indent=1, default=str))
    return table
