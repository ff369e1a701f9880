"""What the check is for, computed from the gateway steps' records when the table is made:
how many streams one GPU serves at FunASR's p99 (463 ms per chunk, its Triton recipe's
figure on an A10), and one worker against two on that GPU.

Neither is a GPU figure unless the workers were seen on the GPU: a sweep whose placement
failed (a worker on the CPU, or the ONNX runtime replaced by PyTorch's) was not run, and
a run whose engine fell back from ONNX to PyTorch gives its figure as a failed row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.device.placement import STAND_IN
from bench.device.records import KEYS, Row, Status, StepRecord, find

TARGET_P99_MS = 463.0
TARGET = f"p99 ≤ {TARGET_P99_MS:.0f} ms"


@dataclass(frozen=True, slots=True)
class Target:
    """The highest level of a sweep below the first that missed the target (0: the lowest
    missed); that level's summary; the first level that missed, and why."""

    streams: int
    summary: dict[str, Any] | None
    missed: int | None
    missed_why: str
    tried: int

    @property
    def line(self) -> str:
        return f"{self.streams} streams per GPU at {TARGET}"

    def detail(self) -> str:
        if self.missed is None:
            return f"every level tried met it, up to {self.streams}: more may"
        if self.streams == 0:
            return f"the lowest level tried, {self.missed} streams: {self.missed_why}"
        return f"{self.missed} streams did not: {self.missed_why}"


def miss(streams: int, level: dict[str, Any]) -> str:
    """Why a level misses the target ("": it meets it): streams that failed or were
    refused, a per-chunk p99 over 463 ms, or no summary at all (timed out, say)."""
    summary = level.get("summary")
    if summary is None:
        return str(level.get("problem") or "no summary")
    failed = streams - summary["completed"]  # an error, a refusal, no final in time
    if failed:
        return f"{failed} of {streams} streams failed"
    p99 = summary["chunk_latency_ms"]["p99"]
    return f"p99 {p99:.0f} ms" if p99 > TARGET_P99_MS else ""


def streams_at_target(levels: list[dict[str, Any]]) -> Target | None:
    """From a sweep's recorded levels (the warm-up aside), in order of streams; None where
    none was measured."""
    measured = sorted((lv for lv in levels if not lv.get("warmup")), key=lambda lv: lv["streams"])
    if not measured:
        return None
    best, summary = 0, None
    for level in measured:
        why = miss(level["streams"], level)
        if why:
            return Target(best, summary, level["streams"], why, len(measured))
        best, summary = level["streams"], level["summary"]
    return Target(best, summary, None, "", len(measured))


def _fallback(records: list[StepRecord]) -> str:
    """Why the GPU steps ran the PyTorch engine in place of the ONNX one ("": they did not)."""
    for name in ("env", "model"):
        record = find(records, name)
        if record is not None and record.data.get("fallback"):
            return str(record.data["fallback"])
    return ""


def _dry_run(records: list[StepRecord]) -> bool:
    env = find(records, "env")
    return bool(env and env.data.get("dry_run"))


def _measured(records: list[StepRecord], run: str) -> tuple[Target | None, str]:
    """The run's target, or None and why there is none."""
    suffix = "" if run == "gateway" else run.removeprefix("gateway")
    placement, sweep = find(records, f"placement{suffix}"), find(records, f"sweep{suffix}")
    if placement is None or sweep is None:
        return None, f"the {run} step did not run"
    if placement.status != "ok":
        off_the_gpu = any(p.get("provider_ok") is False for p in placement.data.get("at_ready", []))
        lead = "not a GPU figure" if off_the_gpu else "no figure"
        return None, f"{lead}: {placement.note or 'its placement failed'}"
    target = streams_at_target(sweep.data.get("levels", []))
    if target is None:
        return None, f"no level measured: {sweep.note or sweep.status}"
    return target, ""


def target_record(records: list[StepRecord]) -> StepRecord:
    """The line "N streams per GPU at p99 ≤ 463 ms", from the two-worker sweep (the
    README's layout)."""
    check = f"target: streams per GPU at {TARGET}, 2 workers"
    target, why = _measured(records, "gateway")
    if target is None:
        return StepRecord(KEYS["target"], "failed", 0.0, [Row(check, "", "")], note=why)
    result = f"**{target.line}** ({target.detail()})"
    status: Status = "ok" if target.streams else "failed"
    note = "" if target.streams else f"no level met {TARGET}"
    if fallback := _fallback(records):
        status, note = "failed", f"the PyTorch engine's figure, a fallback: {fallback}"
    elif _dry_run(records):
        result += f"; {STAND_IN}, not a GPU figure"
    chunk = target.summary["chunk_latency_ms"] if target.summary else {}
    row = Row(
        check,
        "",
        result,
        target.streams,
        chunk.get("p50"),
        chunk.get("p95"),
        chunk.get("p99"),
        target.summary["errors"] if target.summary else None,
    )
    data = {"streams": target.streams, "missed": target.missed, "why": target.missed_why}
    return StepRecord(KEYS["target"], status, 0.0, [row], data, note)


def _memory(records: list[StepRecord], suffix: str) -> tuple[float | None, list[float], float]:
    """GPU MiB of a run's workers together (after the sweep where it was read then; None
    where no worker has a figure), each worker's, and their resident MiB together."""
    placement = find(records, f"placement{suffix}")
    data = placement.data if placement else {}
    placed = data.get("after") or data.get("at_ready") or []
    each = [float(p["gpu_mib"]) for p in placed if p.get("gpu_mib") is not None]
    rss = sum(float(p["rss_mib"]) for p in placed if p.get("rss_mib") is not None)
    return (sum(each) if each else None), each, rss


def workers_record(records: list[StepRecord]) -> StepRecord:
    """One worker against two on one GPU: streams at the target, and GPU memory."""
    check = f"1 worker vs 2 workers on one GPU: streams at {TARGET}, GPU memory"
    parts, counts, memory = [], [], []
    missing = []
    for run, suffix, workers in (("gateway-1", "-1", 1), ("gateway", "", 2)):
        target, why = _measured(records, run)
        gpu, each, rss = _memory(records, suffix)
        if target is None:
            missing.append(f"{workers} worker{'s' * (workers > 1)}: {why}")
            continue
        shown = "none reported" if gpu is None else f"{gpu:.0f} MiB"
        if len(each) > 1:
            shown += f" ({' + '.join(f'{m:.0f}' for m in each)})"
        parts.append(
            f"{workers} worker{'s' * (workers > 1)}: {target.streams} streams,"
            f" GPU memory {shown}, RSS {rss:.0f} MiB"
        )
        counts.append(target.streams)
        memory.append(gpu)
    if missing:
        note = "; ".join(missing)
        row = Row(check, "", "; ".join(parts))
        return StepRecord(KEYS["workers"], "failed", 0.0, [row], note=note)
    result = "; ".join(parts)
    if counts[0] and memory[0] and memory[1]:
        result += (
            f": two serve {counts[1] / counts[0]:.2f}x the streams of one"
            f" for {memory[1] / memory[0]:.2f}x the GPU memory"
        )
    if _dry_run(records):
        result += f"; {STAND_IN}"
    status: Status = "failed" if _fallback(records) else "ok"
    note = "the PyTorch engine's figures, a fallback" if status == "failed" else ""
    data = {"streams": counts, "gpu_mib": memory}
    return StepRecord(KEYS["workers"], status, 0.0, [Row(check, "", result)], data, note)
