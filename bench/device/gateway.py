"""Steps 4 and 5 of ``bench/device/check.sh``: the real gateway on the device, its workers'
placement, then real-time streams through it; ``gateway`` with two workers on the GPU
(the README's layout), ``gateway-1`` with one, for the comparison.

``python -m gateway`` is started with ``ASR_DEVICES=cuda:0``, the run's workers, the runtime
named (``ASR_RUNTIME``: its default follows the devices, and the check must say what it
measures) and the model of the ``model`` step. Once ``/readyz`` answers, each worker's
provider, GPU memory and resident memory are recorded (``bench.device.placement``), and
again after the sweep; a worker that is not on the GPU as asked fails the placement and
nothing is swept: its figures would be the CPU's.

The sweep runs ``bench.load.ws_load`` at each level in real time, the streams' starts spread
evenly over one 600 ms chunk (``--ramp 0.6``: every phase of the chunk taken once), after a
short warm-up (ONNX Runtime's first run of each batch shape is slow). The first level that
misses the target (p99 463 ms per chunk, or a failed stream) ends it, the levels above
could only miss it too; then, time allowing, one level halfway between the last that met
it and the first that did not narrows the answer (``bench.device.target``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.common.gateway import GATEWAY, QUIET, Gateway, NotReady, start
from bench.device.placement import GpuSampler, describe, placement
from bench.device.records import KEYS, PYTHON, Row, Status, StepRecord, write_record
from bench.device.target import miss
from shared.engines import RUNTIME_ALIASES

READY_TIMEOUT_S = 240.0
# Each run: its records' names and its workers on the one GPU.
RUNS = {"gateway": ("placement", "sweep", 2), "gateway-1": ("placement-1", "sweep-1", 1)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", choices=sorted(RUNS), default="gateway")
    parser.add_argument("--models", type=Path, default=Path("/tmp/asr-models"))
    parser.add_argument("--max-batch", type=int, default=64, help="ASR_MAX_BATCH")
    parser.add_argument("--levels", default="100,200,400,800", help="concurrent streams")
    parser.add_argument("--seconds", type=float, default=5.0, help="audio per stream")
    parser.add_argument("--ramp", type=float, default=0.6)
    parser.add_argument("--warmup", type=int, default=64, help="streams of the warm-up")
    parser.add_argument("--refine", action=argparse.BooleanOptionalAction, default=True)


def readyz(server: Gateway | None) -> dict[str, Any] | None:
    """``/readyz``'s body, or None where the server is not there or does not answer."""
    if server is None:
        return None
    try:
        return server.readyz()
    except (OSError, ValueError):
        return None


def run_level(
    args: argparse.Namespace, port: int, streams: int, seconds: float, name: str
) -> tuple[str, dict[str, Any] | None, str]:
    """``bench.load.ws_load`` at one level: its command as shown, its summary (None: none came
    back) and what went wrong, if anything."""
    report = args.work / f"ws-{args.run}-{name}.json"
    report.unlink(missing_ok=True)
    flags = [
        *("--streams", str(streams), "--seconds", str(seconds), "--ramp", str(args.ramp)),
        *("--timeout", "15", "--quiet"),
    ]
    shown = f"{PYTHON} -m bench.load.ws_load --url ws://127.0.0.1:PORT/ {' '.join(flags)}"
    left = args.deadline - time.time() - 3
    try:
        subprocess.run(
            [
                *(sys.executable, "-m", "bench.load.ws_load", "--url", f"ws://127.0.0.1:{port}/"),
                *flags,
                *("--json", str(report)),
            ],
            cwd=ROOT,
            timeout=max(5.0, min(left, seconds + args.ramp + 60)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # its Markdown: the JSON report has it all
            check=False,
        )
    except subprocess.TimeoutExpired:
        return shown, None, "timed out"
    if not report.is_file():
        return shown, None, "no report"
    summary: dict[str, Any] = json.loads(report.read_text())["summary"]
    chunk = summary["chunk_latency_ms"]
    print(
        f"{name}: {summary['completed']}/{streams} completed, {summary['errors']} errors;"
        f" per-chunk p50 {chunk['p50']:.1f} p95 {chunk['p95']:.1f} p99 {chunk['p99']:.1f} ms"
    )
    return shown, summary, ""


def gateway_step(args: argparse.Namespace) -> int:
    """Serve, place, sweep; the records are rewritten as each part ends, so that a time
    limit leaves what was measured."""
    workers = RUNS[args.run][2]
    env = {
        "ASR_MODEL": str(args.model),
        "ASR_RUNTIME": RUNTIME_ALIASES[args.engine],
        "ASR_DEVICES": args.device,
        "ASR_WORKERS_PER_DEVICE": str(workers),
        "ASR_MAX_BATCH": str(args.max_batch),
        "ASR_MAX_SESSIONS": "2000",
        "ASR_MODEL_CACHE": str(args.models),
        "UVICORN_WS_PER_MESSAGE_DEFLATE": "false",
    }
    run = _GatewayRun(args, env, workers)
    try:
        if not run.start():
            return 1
        run.sweep()
        return 0
    finally:
        run.stop()


class _GatewayRun:
    def __init__(self, args: argparse.Namespace, env: dict[str, str], workers: int) -> None:
        self.args, self.env, self.workers = args, env, workers
        self.placement_name, self.sweep_name, _ = RUNS[args.run]
        self.started = time.monotonic()
        self.port = 0  # the server's, once started
        shown_env = " ".join(f"{k}={v}" for k, v in env.items())
        self.command = f"{shown_env} {PYTHON} -m gateway --port PORT"
        self.ready_s = 0.0
        self.at_ready: list[dict[str, Any]] = []
        self.rows: list[Row] = []
        self.levels: list[dict[str, Any]] = []
        self.server: Gateway | None = None
        self._log = args.work / f"{args.run}.log"

    def _write(
        self, name: str, status: Status, rows: list[Row], data: dict[str, Any], note: str
    ) -> None:
        seconds = time.monotonic() - self.started
        write_record(self.args.work, StepRecord(KEYS[name], status, seconds, rows, data, note))

    def _place(self, workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        runtime = self.env["ASR_RUNTIME"]
        return placement(workers, self.args.device, runtime, self.args.dry_run)

    def start(self) -> bool:
        """Start the server and wait for /readyz; record the placement. False where the
        server did not start or its workers are not where they were asked to be."""
        self._write(self.placement_name, "failed", [], {"env": self.env}, "not ready")
        self._write(self.sweep_name, "failed", [], {}, "not run: the gateway did not start")
        limit = max(1.0, min(READY_TIMEOUT_S, self.args.deadline - time.time()))
        try:
            self.server = start(
                self.env, log=self._log, entry=GATEWAY, options=QUIET, ready_timeout=limit
            )
        except NotReady as error:
            note = f"no /readyz 200 (exit code {error.code}): {error.tail[-600:]}"
            self._write(self.placement_name, "failed", [], {"env": self.env}, note)
            return False
        self.port = self.server.port
        ready = self.server.readyz()
        self.ready_s = time.monotonic() - self.started
        self.at_ready = self._place(ready["workers"])
        print(f"ready in {self.ready_s:.0f} s: {describe(self.at_ready)}")
        if problem := self._write_placement(None):
            note = f"not run: {problem}; its figures would not be the GPU's"
            self._write(self.sweep_name, "failed", [], {}, note)
            return False
        return True

    def _write_placement(self, after: list[dict[str, Any]] | None) -> str:
        """Record the placement; what is wrong with it ("": nothing)."""
        device, workers = self.args.device, self.workers
        on_device = sum(1 for p in self.at_ready if p["device"] == device and p["state"] == "ready")
        elsewhere = [p["provider_said"] for p in self.at_ready if p["provider_ok"] is False]
        unsaid = all(p["provider_ok"] is None for p in self.at_ready)
        result = f"ready in {self.ready_s:.0f} s; {on_device} of {workers} ready on {device}"
        result += " (no provider reported: the device it was given only). " if unsaid else ". "
        result += describe(self.at_ready)
        if after is not None:
            result += f". After the sweep: {describe(after)}"
        problem = "; ".join(elsewhere)
        if on_device != workers:
            problem = f"{on_device} of {workers} ready on {device}" + (problem and f"; {problem}")
        status: Status = "failed" if problem else "ok"
        check = f"placement: {workers} worker{'s' * (workers > 1)} on one GPU, /readyz"
        data = {"env": self.env, "ready_s": round(self.ready_s, 1), "at_ready": self.at_ready}
        row = Row(check, self.command, result)
        self._write(self.placement_name, status, [row], {**data, "after": after}, problem)
        return problem

    def _sweep_label(self) -> str:
        return f"gateway, {self.workers} worker{'s' * (self.workers > 1)}, real-time streams"

    def _level(self, streams: int) -> str:
        """One level, recorded; why it misses the target ("": it met it)."""
        args = self.args
        with GpuSampler() as gpu:
            shown, summary, problem = run_level(
                args, self.port, streams, args.seconds, str(streams)
            )
        level = {"streams": streams, "summary": summary, "gpu": gpu.summary(), "problem": problem}
        self.levels.append(level)
        label = self._sweep_label()
        if summary is None:
            self.rows.append(Row(label, shown, problem, streams))
        else:
            self.rows.append(_level_row(label, shown, streams, summary, gpu.summary()))
        self._write(self.sweep_name, "ok", self.rows, {"levels": self.levels}, "")
        return miss(streams, level)

    def _time_for_a_level(self, streams: int) -> bool:
        """Whether a level of ``streams`` ends before the deadline: its audio, its ramp, and
        its connections opened and finals read (a second or so per hundred streams)."""
        needed = float(self.args.seconds) + float(self.args.ramp) + 5 + streams / 100
        return float(self.args.deadline) - time.time() > needed

    def sweep(self) -> None:
        args = self.args
        with GpuSampler() as gpu:
            _, warm, _ = run_level(args, self.port, args.warmup, 3.0, "warmup")
        self.levels.append(
            {"warmup": True, "streams": args.warmup, "summary": warm, "gpu": gpu.summary()}
        )
        stopped, met, missed = "", 0, 0
        for streams in (int(v) for v in args.levels.split(",")):
            if not self._time_for_a_level(streams):
                stopped = f"out of time before {streams} streams"
                break
            if why := self._level(streams):
                stopped, missed = f"stopped at {streams} streams: {why}", streams
                break
            met = streams
        halfway = (met + missed) // 2
        if args.refine and missed and halfway > met and self._time_for_a_level(halfway):
            why = self._level(halfway)
            stopped += f"; then {halfway} streams: {why or 'met the target'}"
        status: Status = "ok" if self.rows else "failed"
        self._write(self.sweep_name, status, self.rows, {"levels": self.levels}, stopped)
        final = readyz(self.server)
        self._write_placement(self._place(final["workers"]) if final else None)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def _level_row(
    label: str, shown: str, streams: int, summary: dict[str, Any], gpu: dict[str, float] | None
) -> Row:
    chunk = summary["chunk_latency_ms"]
    wall = summary["wall_seconds"] or float("nan")
    result = (
        f"{summary['completed']}/{streams} completed, {summary['refused']} refused;"
        f" {summary['audio_seconds'] / wall:.0f} audio s per s;"
        f" final p95 {summary['final_latency_ms']['p95']:.0f} ms;"
        f" server compute p50 {summary['server_compute_ms']['p50']:.1f} ms,"
        f" queue p95 {summary['server_queue_ms']['p95']:.1f} ms"
    )
    if gpu is not None:
        result += f"; GPU util {gpu['util_mean']:.0f} % mean, {gpu['util_max']:.0f} max"
    return Row(
        label,
        shown,
        result,
        streams,
        chunk["p50"],
        chunk["p95"],
        chunk["p99"],
        summary["errors"],
    )
