"""Capacity against the raw ceiling, in one run: the numbers of BENCHMARKS.md's summary.

    E="ASR_MODEL=synthetic:large;ASR_DEVICES=cpu,cpu;ASR_ENGINE=paraformer-onnx"
    python -m bench.load.capacity --name "ONNX int8" --env "$E;ASR_ONNX_PRECISION=int8" \\
        --ceiling paraformer-onnx:int8:8 --streams 24,28,32,36,40 --arrivals uniform,random

1. The raw ceiling (``bench.models.raw_ceiling``: the engine alone in 2 processes, ``BATCH``
   streams each, no gateway) unless ``--ceiling`` is left out: before the first point and
   after every point, while the gateway's workers idle. This VM's speed drifts by up to
   1.35x within four minutes (35.9 then 26.7 streams, one run), so each point is set
   against the mean of the ceilings just before and just after it.
2. The gateway (``uvicorn gateway.app:app`` with ``--env``; or ``--url``, a server already
   running, e.g. FunASR's own from ``bench.load.funasr_server``): at saturation (``--fast``,
   ``--saturation`` streams), then real-time streams at each ``--streams`` level for each
   ``--arrivals`` (starts spread evenly over one chunk, or at random within it).
3. Capacity: the most streams whose p95 per-chunk latency is under ``--bar-ms`` (and, with
   ``--final-bar-ms``, whose p95 final latency is under it) with no errors; the sweep of an
   arrival pattern stops after two levels over the bar. Then one more point at 75 % of the
   capacity, and the workers' resident memory.

Every point is one ``bench.load.ws_load`` run; its JSON is kept in ``--out``. With
``--protocol sherpa`` and ``--url``, the same sweep measures sherpa-onnx's online WebSocket
server (``bench.peers.sherpa_onnx`` runs it beside ours).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.common import procfs
from bench.common.report import header
from bench.load import ws_load
from bench.load.sweep import Config, start_gateway
from bench.models.raw_ceiling import look_back_of, measure

CHUNK_S = 0.6


@dataclass(frozen=True, slots=True)
class LoadPoint:
    arrivals: str
    streams: int
    fast: bool
    errors: int
    chunk_p50_ms: float
    chunk_p95_ms: float
    chunk_p99_ms: float
    final_p95_ms: float
    audio_s_per_s: float
    batch_mean: float
    ceiling: float = float("nan")  # the mean of the raw ceilings just before and after it

    @property
    def of_ceiling(self) -> float:
        """Streams (at saturation: audio seconds per second) over the ceiling around it."""
        served = self.audio_s_per_s if self.fast else self.streams
        return served / self.ceiling


@dataclass(slots=True)
class Report:
    name: str
    ceiling: float | None = None  # the mean of ceilings
    ceilings: list[float] = field(default_factory=list)  # in the order measured
    ceiling_batch: int | None = None
    saturation: LoadPoint | None = None
    points: list[LoadPoint] = field(default_factory=list)
    capacity: dict[str, int] = field(default_factory=dict)
    at_75: dict[str, LoadPoint] = field(default_factory=dict)
    worker_rss_mib: list[float] = field(default_factory=list)


def load_point(
    url: str, streams: int, args: argparse.Namespace, arrivals: str, fast: bool
) -> LoadPoint:
    argv = ["--url", url, "--protocol", args.protocol, "--mode", args.mode]
    argv += ["--streams", str(streams)]
    argv += ["--seconds", str(args.seconds), "--ramp", str(args.ramp), "--quiet"]
    argv += ["--arrivals", arrivals] + (["--fast"] if fast else [])
    summary, records = ws_load.run(ws_load.parse_args(argv))
    batches = [b for r in records for b in r.batch_sizes]
    point = LoadPoint(
        arrivals=arrivals,
        streams=streams,
        fast=fast,
        errors=summary.errors + summary.refused,
        chunk_p50_ms=summary.chunk_latency_ms.p50,
        chunk_p95_ms=summary.chunk_latency_ms.p95,
        chunk_p99_ms=summary.chunk_latency_ms.p99,
        final_p95_ms=summary.final_latency_ms.p95,
        audio_s_per_s=summary.audio_seconds / summary.wall_seconds,
        batch_mean=sum(batches) / len(batches) if batches else float("nan"),
    )
    print(json.dumps(asdict(point)), file=sys.stderr, flush=True)
    return point


def under_bar(point: LoadPoint, args: argparse.Namespace) -> bool:
    final_ok = args.final_bar_ms is None or point.final_p95_ms < args.final_bar_ms
    return point.errors == 0 and point.chunk_p95_ms < args.bar_ms and final_ok


def rss_mib(pid: int) -> float:
    try:
        return procfs.rss_mib(pid)
    except ProcessLookupError:
        return float("nan")


def measure_ceiling(report: Report, args: argparse.Namespace) -> None:
    runtime, precision, batch = args.ceiling.split(":")
    look_back = look_back_of(runtime)
    ceiling = measure(
        args.model, runtime, precision, look_back, 2, int(batch), args.ceiling_seconds, 1, 0
    )
    report.ceilings.append(ceiling.realtime_streams)
    report.ceiling, report.ceiling_batch = statistics.mean(report.ceilings), int(batch)
    print(f"raw ceiling: {ceiling.realtime_streams:.2f}", file=sys.stderr, flush=True)


def bracketed(point: LoadPoint, report: Report, args: argparse.Namespace) -> LoadPoint:
    """``point`` set against the ceilings measured just before and just after it."""
    if not args.ceiling:
        return point
    measure_ceiling(report, args)
    return replace(point, ceiling=statistics.mean(report.ceilings[-2:]))


def run(args: argparse.Namespace) -> Report:
    report = Report(args.name)
    if args.ceiling:
        measure_ceiling(report, args)
    gateway = None
    url = args.url
    if url is None:
        env = dict(item.split("=", 1) for item in args.env.split(";") if item)
        gateway = start_gateway(Config(args.name, env, args.checkout))
        url = gateway.url
    try:
        if args.saturation:
            point = load_point(url, args.saturation, args, "uniform", fast=True)
            report.saturation = bracketed(point, report, args)
        for arrivals in args.arrivals.split(","):
            over = 0
            for streams in (int(s) for s in args.streams.split(",")):
                point = bracketed(load_point(url, streams, args, arrivals, False), report, args)
                report.points.append(point)
                if under_bar(point, args):
                    report.capacity[arrivals] = max(report.capacity.get(arrivals, 0), streams)
                    over = 0
                else:
                    over += 1
                    if over == 2:
                        break
            capacity = report.capacity.get(arrivals, 0)
            if capacity:
                three_quarters = max(1, round(0.75 * capacity))
                point = load_point(url, three_quarters, args, arrivals, False)
                report.at_75[arrivals] = bracketed(point, report, args)
        if gateway is not None:
            report.worker_rss_mib = [rss_mib(pid) for pid in procfs.workers(gateway.pid)]
    finally:
        if gateway is not None:
            gateway.stop()
    return report


def markdown(report: Report, args: argparse.Namespace) -> str:
    lines = [
        *header(
            "arrivals",
            "streams",
            "errors",
            "p50 chunk ms",
            "p95 chunk ms",
            "p99 chunk ms",
            "final p95 ms",
            "audio s per s",
            "mean batch",
            "raw ceiling around it",
            "streams / ceiling",
        ),
    ]
    points = ([report.saturation] if report.saturation else []) + report.points
    for p in points:
        lines.append(
            f"| {'fast' if p.fast else p.arrivals} | {p.streams} | {p.errors}"
            f" | {p.chunk_p50_ms:.0f} | {p.chunk_p95_ms:.0f} | {p.chunk_p99_ms:.0f}"
            f" | {p.final_p95_ms:.0f} | {p.audio_s_per_s:.2f} | {p.batch_mean:.1f}"
            f" | {p.ceiling:.2f} | {p.of_ceiling:.2f} |"
        )
    lines.append("")
    for arrivals, capacity in report.capacity.items():
        served = next(p for p in report.points if p.arrivals == arrivals and p.streams == capacity)
        ratio = f", {served.of_ceiling:.2f} x the ceiling around it" if report.ceiling else ""
        at = report.at_75.get(arrivals)
        p95 = f"; at {at.streams} streams p95 {at.chunk_p95_ms:.0f} ms" if at else ""
        lines.append(f"- capacity ({arrivals}): {capacity} streams{ratio}{p95}")
    if report.ceiling is not None:
        each = ", ".join(f"{c:.2f}" for c in report.ceilings)
        lines.append(
            f"- raw ceiling: mean {report.ceiling:.2f} (batch {report.ceiling_batch};"
            f" each, in order: {each})"
        )
    if report.saturation is not None:
        sat = report.saturation
        ratio = f" ({sat.of_ceiling:.2f} x the ceiling around it)" if report.ceiling else ""
        lines.append(f"- saturation (--fast): {sat.audio_s_per_s:.2f} audio s per s{ratio}")
    if report.worker_rss_mib:
        lines.append(f"- worker RSS MiB: {', '.join(f'{r:.0f}' for r in report.worker_rss_mib)}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load.capacity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--name", required=True)
    parser.add_argument("--env", default="", help="the gateway's ASR_* variables, ';'-separated")
    parser.add_argument("--url", help="measure a server already running instead")
    parser.add_argument(
        "--protocol",
        choices=["funasr", "sherpa"],
        default="funasr",
        help="the server's: sherpa-onnx's with --url only",
    )
    parser.add_argument(
        "--checkout", type=Path, help="serve from this tree (git worktree add DIR COMMIT)"
    )
    parser.add_argument("--model", default="synthetic:large", help="the ceiling's model")
    parser.add_argument("--ceiling", help="RUNTIME:PRECISION:BATCH for bench.models.raw_ceiling")
    parser.add_argument("--ceiling-seconds", type=float, default=10.0)
    parser.add_argument("--mode", choices=["online", "2pass"], default="online")
    parser.add_argument("--streams", default="8,16,24,32")
    parser.add_argument("--arrivals", default="uniform,random")
    parser.add_argument("--saturation", type=int, default=0, help="--fast streams (0: none)")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--ramp", type=float, default=CHUNK_S)
    parser.add_argument("--bar-ms", type=float, default=600.0)
    parser.add_argument("--final-bar-ms", type=float)
    parser.add_argument("--out", type=Path, default=Path("bench/results/capacity"))
    args = parser.parse_args(argv)
    if args.protocol == "sherpa" and args.url is None:
        parser.error("--protocol sherpa measures a server already running: give its --url")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    report = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    slug = "".join(c if c.isalnum() else "-" for c in args.name.lower())
    (args.out / f"{slug}.json").write_text(json.dumps(asdict(report), indent=2))
    table = markdown(report, args)
    (args.out / f"{slug}.md").write_text(table + "\n")
    print(f"## {args.name} ({time.time() - started:.0f} s)\n\n{table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
