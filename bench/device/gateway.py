"""Steps 4 and 5 of ``bench/device/check.sh``: the real gateway on the device, its workers'
placement, then real-time streams through it.

``python -m gateway`` is started with ``ASR_DEVICES=cuda:0 ASR_WORKERS_PER_DEVICE=2`` (or
what the flags say) and the model of the ``model`` step; once ``/readyz`` answers, each
worker's device, GPU memory (nvidia-smi's compute apps, by pid) and resident memory are
recorded, and again after the sweep. The sweep runs ``bench.load.ws_load`` at each level in real
time, the streams' starts spread evenly over one 600 ms chunk (``--ramp 0.6``: every phase
of the chunk taken once, so that the chunks arrive evenly, not all in one step), with a
short warm-up first (ONNX Runtime's first run of each batch shape is slow). A level that
fails streams or whose p99 passes ``--stop-p99-ms`` ends the sweep: the levels above it
would only overload the gateway longer.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, procfs
from bench.common.gateway import GATEWAY, QUIET, Gateway, NotReady, start
from bench.device.records import KEYS, PYTHON, Row, Status, StepRecord, write_record

READY_TIMEOUT_S = 240.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", type=Path, default=Path("/tmp/asr-models"))
    parser.add_argument("--workers", type=int, default=2, help="ASR_WORKERS_PER_DEVICE")
    parser.add_argument("--max-batch", type=int, default=64, help="ASR_MAX_BATCH")
    parser.add_argument("--levels", default="50,100,200,300,400", help="concurrent streams")
    parser.add_argument("--seconds", type=float, default=10.0, help="audio per stream")
    parser.add_argument("--ramp", type=float, default=0.6)
    parser.add_argument("--warmup", type=int, default=64, help="streams of the warm-up")
    parser.add_argument("--stop-p99-ms", type=float, default=5000.0)


def nvidia_smi(query: str, kind: str = "gpu") -> list[list[str]]:
    """``nvidia-smi --query-{kind}={query}`` as rows of fields; [] where there is none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-{kind}={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]


def gpu_memory_by_pid() -> dict[int, float]:
    """MiB of GPU memory each process holds (nvidia-smi's compute apps)."""
    used: dict[int, float] = {}
    for fields in nvidia_smi("pid,used_memory", "compute-apps"):
        try:
            used[int(fields[0])] = used.get(int(fields[0]), 0.0) + float(fields[1])
        except (ValueError, IndexError):
            continue
    return used


def rss_mib(pid: int) -> float | None:
    try:
        return procfs.rss_mib(pid)
    except ProcessLookupError:
        return None


def readyz(server: Gateway | None) -> dict[str, Any] | None:
    """``/readyz``'s body, or None where the server is not there or does not answer."""
    if server is None:
        return None
    try:
        return server.readyz()
    except (OSError, ValueError):
        return None


def placement(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each worker's device, state, GPU MiB (None: no nvidia-smi, or pid not listed) and
    resident MiB."""
    gpu = gpu_memory_by_pid()
    return [
        {
            "index": w.get("index"),
            "device": w.get("device"),
            "state": w.get("state"),
            "pid": w.get("pid"),
            "gpu_mib": gpu.get(w["pid"]) if w.get("pid") is not None else None,
            "rss_mib": rss_mib(w["pid"]) if w.get("pid") is not None else None,
        }
        for w in workers
    ]


def _describe(placed: list[dict[str, Any]]) -> str:
    def mib(value: float | None) -> str:
        return "?" if value is None else f"{value:.0f}"

    return ", ".join(
        f"worker {p['index']} {p['device']} {p['state']}: GPU {mib(p['gpu_mib'])} MiB,"
        f" RSS {mib(p['rss_mib'])} MiB"
        for p in placed
    )


class GpuSampler:
    """nvidia-smi's utilization and memory every half second, in a thread, while asked."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for fields in nvidia_smi("utilization.gpu,memory.used")[:1]:
                try:
                    self.samples.append((float(fields[0]), float(fields[1])))
                except (ValueError, IndexError):
                    pass

    def summary(self) -> dict[str, float] | None:
        if not self.samples:
            return None
        utilization = [u for u, _ in self.samples]
        return {
            "util_mean": round(sum(utilization) / len(utilization), 1),
            "util_max": max(utilization),
            "memory_max_mib": max(m for _, m in self.samples),
        }


def run_level(
    args: argparse.Namespace, port: int, streams: int, seconds: float, name: str
) -> tuple[str, dict[str, Any] | None, str]:
    """``bench.load.ws_load`` at one level: its command as shown, its summary (None: none came
    back) and what went wrong, if anything."""
    report = args.work / f"ws-{name}.json"
    report.unlink(missing_ok=True)
    flags = [
        *("--streams", str(streams), "--seconds", str(seconds), "--ramp", str(args.ramp)),
        *("--timeout", "15", "--quiet"),
    ]
    shown = f"{PYTHON} -m bench.load.ws_load --url ws://127.0.0.1:PORT/ {' '.join(flags)}"
    left = args.deadline - time.time() - 10
    try:
        subprocess.run(
            [
                *(sys.executable, "-m", "bench.load.ws_load", "--url", f"ws://127.0.0.1:{port}/"),
                *flags,
                *("--json", str(report)),
            ],
            cwd=ROOT,
            timeout=max(5.0, min(left, seconds + args.ramp + 90)),
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
    env = {
        "ASR_MODEL": str(args.model),
        "ASR_ENGINE": args.engine,
        "ASR_DEVICES": args.device,
        "ASR_WORKERS_PER_DEVICE": str(args.workers),
        "ASR_MAX_BATCH": str(args.max_batch),
        "ASR_MAX_SESSIONS": "2000",
        "ASR_MODEL_CACHE": str(args.models),
        "UVICORN_WS_PER_MESSAGE_DEFLATE": "false",
    }
    run = _GatewayRun(args, env)
    try:
        if not run.start():
            return 1
        run.sweep()
        return 0
    finally:
        run.stop()


class _GatewayRun:
    def __init__(self, args: argparse.Namespace, env: dict[str, str]) -> None:
        self.args, self.env = args, env
        self.started = time.monotonic()
        self.port = 0  # the server's, once started
        shown_env = " ".join(f"{k}={v}" for k, v in env.items())
        self.command = f"{shown_env} {PYTHON} -m gateway --port PORT"
        self.ready_s = 0.0
        self.at_ready: list[dict[str, Any]] = []
        self.rows: list[Row] = []
        self.levels: list[dict[str, Any]] = []
        self.server: Gateway | None = None
        self._log = args.work / "gateway.log"

    def _write(
        self, name: str, status: Status, rows: list[Row], data: dict[str, Any], note: str
    ) -> None:
        seconds = time.monotonic() - self.started
        write_record(self.args.work, StepRecord(KEYS[name], status, seconds, rows, data, note))

    def start(self) -> bool:
        """Start the server and wait for /readyz; record the placement."""
        self._write("placement", "failed", [], {"env": self.env}, "not ready")
        self._write("sweep", "failed", [], {}, "not run: the gateway did not start")
        limit = max(1.0, min(READY_TIMEOUT_S, self.args.deadline - time.time()))
        try:
            self.server = start(
                self.env, log=self._log, entry=GATEWAY, options=QUIET, ready_timeout=limit
            )
        except NotReady as error:
            note = f"no /readyz 200 (exit code {error.code}): {error.tail[-600:]}"
            self._write("placement", "failed", [], {"env": self.env}, note)
            return False
        self.port = self.server.port
        ready = self.server.readyz()
        self.ready_s = time.monotonic() - self.started
        self.at_ready = placement(ready["workers"])
        print(f"ready in {self.ready_s:.0f} s: {_describe(self.at_ready)}")
        self._write_placement(None)
        return True

    def _write_placement(self, after: list[dict[str, Any]] | None) -> None:
        device, workers = self.args.device, self.args.workers
        on_device = sum(1 for p in self.at_ready if p["device"] == device and p["state"] == "ready")
        result = f"ready in {self.ready_s:.0f} s; {on_device} workers ready on {device}. "
        result += _describe(self.at_ready)
        if after is not None:
            result += f". After the sweep: {_describe(after)}"
        status: Status = "ok" if on_device == workers else "failed"
        note = "" if status == "ok" else f"{on_device} of {workers} ready on {device}"
        row = Row(f"placement: {workers} workers per GPU, /readyz", self.command, result)
        data = {"env": self.env, "ready_s": round(self.ready_s, 1), "at_ready": self.at_ready}
        self._write("placement", status, [row], {**data, "after": after}, note)

    def sweep(self) -> None:
        args = self.args
        with GpuSampler() as gpu:
            _, warm, problem = run_level(args, self.port, args.warmup, 3.0, "warmup")
        self.levels.append(
            {"warmup": True, "streams": args.warmup, "summary": warm, "gpu": gpu.summary()}
        )
        stopped = ""
        for streams in (int(v) for v in args.levels.split(",")):
            if args.deadline - time.time() < args.seconds + args.ramp + 30:
                stopped = f"out of time before {streams} streams"
                break
            with GpuSampler() as gpu:
                shown, summary, problem = run_level(
                    args, self.port, streams, args.seconds, str(streams)
                )
            self.levels.append(
                {"streams": streams, "summary": summary, "gpu": gpu.summary(), "problem": problem}
            )
            if summary is None:
                self.rows.append(Row("gateway, real-time streams", shown, problem, streams))
                stopped = f"{streams} streams: {problem}"
            else:
                self.rows.append(_level_row(shown, streams, summary, gpu.summary()))
                failed = summary["errors"] + summary["refused"]
                if failed or summary["chunk_latency_ms"]["p99"] > args.stop_p99_ms:
                    stopped = f"stopped after {streams} streams ({failed} failed)"
            self._write("sweep", "ok", self.rows, {"levels": self.levels}, stopped)
            if stopped:
                break
        status: Status = "ok" if self.rows else "failed"
        self._write("sweep", status, self.rows, {"levels": self.levels}, stopped)
        final = readyz(self.server)
        self._write_placement(placement(final["workers"]) if final else None)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def _level_row(
    shown: str, streams: int, summary: dict[str, Any], gpu: dict[str, float] | None
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
        "gateway, real-time streams",
        shown,
        result,
        streams,
        chunk["p50"],
        chunk["p95"],
        chunk["p99"],
        summary["errors"],
    )
