"""Step 5 of ``bench/device/check.sh``, beside the sweep (``bench.device.gateway``): the
raw ceiling, ``bench.models.raw_ceiling`` on the device with no gateway at all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from bench.common import ROOT
from bench.device.records import KEYS, PYTHON, Row, Status, StepRecord, write_record


def ceiling_step(args: argparse.Namespace) -> StepRecord:
    """``bench.models.raw_ceiling`` on the device, one run per ``PxS`` point (P processes, S streams
    stepped together), each in its own process and time limit."""
    started = time.monotonic()
    rows: list[Row] = []
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    look_back = "0,0" if args.engine == "paraformer-onnx" else "4,1"
    record = StepRecord(KEYS["ceiling"], "ok", 0.0, rows, {"runs": runs})
    for point in args.points.split(","):
        processes, streams = (int(v) for v in point.split("x"))
        left = args.deadline - time.time()
        if left < args.seconds + 15:  # its processes' start and model load, then the run
            skipped.append(point)
            continue
        flags = [
            *("--model", str(args.model), "--engine", args.engine, "--device", args.device),
            *("--streams", str(streams), "--processes", str(processes)),
            *("--seconds", str(args.seconds), "--repeat", "1", "--look-back", look_back),
        ]
        shown = f"{PYTHON} -m bench.models.raw_ceiling {' '.join(flags)}"
        try:
            completed = subprocess.run(
                [sys.executable, "-m", "bench.models.raw_ceiling", *flags],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=min(left - 2, args.seconds + 180),
            )
        except subprocess.TimeoutExpired:
            rows.append(Row("raw ceiling", shown, "timed out", streams * processes))
            continue
        measured = [
            json.loads(line)
            for line in completed.stderr.splitlines()
            if line.startswith("{") and '"realtime_streams"' in line
        ]
        if completed.returncode != 0 or not measured:
            last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append(Row("raw ceiling", shown, f"failed: {last[:200]}", streams * processes))
            continue
        run = measured[-1]
        runs.append(run)
        rows.append(
            Row(
                f"raw ceiling, {processes} process{'es' if processes > 1 else ''}"
                f" x batch {streams}",
                shown,
                f"{run['realtime_streams']:.1f} real-time streams;"
                f" {run['chunk_ms_mean']:.2f} ms per stream-chunk;"
                f" RSS {run['rss_mib_max']:.0f} MiB per process",
                streams * processes,
            )
        )
        write_record(args.work, record)
    note = f"not run, out of time: {', '.join(skipped)}" if skipped else ""
    status: Status = "ok" if runs else "failed"
    return StepRecord(
        KEYS["ceiling"], status, time.monotonic() - started, rows, {"runs": runs}, note
    )
