"""Benchmark driver: start the gateway per configuration, sweep concurrency, repeat, plot.

For each configuration (a set of ``ASR_*`` variables) it starts ``uvicorn gateway.app:app``
as a subprocess on a free port, waits for ``/readyz``, runs ``bench.load.ws_load`` at each
concurrency ``--repeat`` times, and records the gateway's CPU seconds (from /proc, the
server process and its workers) for each run, and the server process's alone: its event
loop, which parses every frame, against the workers' decoding. It writes every run as JSON,
a Markdown table of medians with their spread (min-max), and PNG plots (p95 per-chunk
latency and server CPU per audio hour against concurrency, one line per configuration).

    python -m bench.load.sweep --config "shm:ASR_MODEL=checksum;ASR_TRANSPORT=shm" \\
        --config "queue:ASR_MODEL=checksum;ASR_TRANSPORT=queue" \\
        --streams 50,100,200 --seconds 10 --repeat 3 --out bench/results/transport

A configuration named ``NAME@DIR`` is served from the checkout in DIR (``git worktree add
DIR COMMIT``): a change measured against its parent in one command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.common.gateway import Gateway, NotReady, served
from bench.common.procfs import cpu_seconds, family_cpu_seconds
from bench.common.report import header, spread
from bench.load import ws_load

READY_TIMEOUT_S = 600.0  # synthetic:large is built on first use
CHUNK_SECONDS = 0.6  # a model chunk of FunASR's [5, 10, 5]: a frame is this over --chunk-interval


@dataclass(frozen=True, slots=True)
class Config:
    name: str
    env: dict[str, str]
    checkout: Path | None = None  # another tree to serve from (before and after a change)


@dataclass(frozen=True, slots=True)
class Point:
    config: str
    streams: int
    repeat: int
    completed: int
    errors: int
    refused: int
    verified: int | None
    chunk_p50_ms: float
    chunk_p95_ms: float
    chunk_p99_ms: float
    final_p95_ms: float
    server_cpu_s: float
    audio_s: float
    server_cpu_s_per_audio_hour: float
    client_cpu_s: float
    throughput_rt: float  # audio seconds decoded per wall second of the run
    # The server process alone (its event loop: frames, sessions, the pools' I/O), without
    # its workers. NaN in points recorded before it was.
    event_loop_cpu_s: float = float("nan")
    frames: int = 0  # audio frames the clients sent

    @property
    def event_loop_share(self) -> float:
        """The server process's part of the server's CPU (it and its workers)."""
        return self.event_loop_cpu_s / self.server_cpu_s if self.server_cpu_s else float("nan")

    @property
    def event_loop_us_per_frame(self) -> float:
        return self.event_loop_cpu_s / self.frames * 1e6 if self.frames else float("nan")


def parse_config(text: str) -> Config:
    """``NAME:VAR=VALUE;...``, or ``NAME@DIR:...`` to serve from the checkout in DIR."""
    label, _, assignments = text.partition(":")
    name, _, checkout = label.partition("@")
    env = dict(item.split("=", 1) for item in assignments.split(";") if item)
    return Config(name, env, Path(checkout).resolve() if checkout else None)


def start_gateway(config: Config) -> Gateway:
    """The gateway as the benchmarks serve it, with ``config``'s variables."""
    try:
        return served(config.env, ready_timeout=READY_TIMEOUT_S, cwd=config.checkout or ROOT)
    except NotReady as error:
        raise SystemExit(f"the gateway for {config.name} did not become ready: {error}") from None


def run_point(
    gateway: Gateway, config: Config, streams: int, repeat: int, args: argparse.Namespace
) -> Point:
    load_args = ws_load.parse_args(
        [
            "--url",
            gateway.url,
            "--streams",
            str(streams),
            "--seconds",
            str(args.seconds),
            "--ramp",
            str(args.ramp),
            "--quiet",
            *(["--verify"] if config.env.get("ASR_MODEL") == "checksum" else []),
            *(["--fast"] if args.fast else []),
            "--chunk-interval",
            str(args.chunk_interval),
            "--arrivals",
            args.arrivals,
            "--mode",
            args.mode,
        ]
    )
    cpu_before, loop_before = family_cpu_seconds(gateway.pid), cpu_seconds(gateway.pid)
    summary, _ = ws_load.run(load_args)
    server_cpu = family_cpu_seconds(gateway.pid) - cpu_before
    event_loop_cpu = cpu_seconds(gateway.pid) - loop_before
    frame_s = CHUNK_SECONDS / args.chunk_interval
    audio_hours = summary.audio_seconds / 3600
    return Point(
        config=config.name,
        streams=streams,
        repeat=repeat,
        completed=summary.completed,
        errors=summary.errors,
        refused=summary.refused,
        verified=summary.verified,
        chunk_p50_ms=summary.chunk_latency_ms.p50,
        chunk_p95_ms=summary.chunk_latency_ms.p95,
        chunk_p99_ms=summary.chunk_latency_ms.p99,
        final_p95_ms=summary.final_latency_ms.p95,
        server_cpu_s=server_cpu,
        audio_s=summary.audio_seconds,
        server_cpu_s_per_audio_hour=server_cpu / audio_hours if audio_hours else float("nan"),
        client_cpu_s=summary.client_cpu_seconds,
        throughput_rt=summary.audio_seconds / summary.wall_seconds,
        event_loop_cpu_s=event_loop_cpu,
        frames=round(summary.audio_seconds / frame_s),
    )


def markdown(points: list[Point]) -> str:
    lines = [
        *header(
            "config",
            "streams",
            "runs",
            "errors",
            "p50 chunk ms",
            "p95 chunk ms (median, min-max)",
            "p99 chunk ms",
            "final p95 ms",
            "server CPU s / audio h",
            "event loop share",
            "event loop us / frame",
            "client CPU s",
            "audio s per s",
        ),
    ]
    keys = sorted({(p.config, p.streams) for p in points}, key=lambda k: (k[0], k[1]))
    for name, streams in keys:
        runs = [p for p in points if p.config == name and p.streams == streams]
        lines.append(
            f"| {name} | {streams} | {len(runs)} | {sum(p.errors for p in runs)}"
            f" | {statistics.median(p.chunk_p50_ms for p in runs):.1f}"
            f" | {spread([p.chunk_p95_ms for p in runs])}"
            f" | {spread([p.chunk_p99_ms for p in runs])}"
            f" | {statistics.median(p.final_p95_ms for p in runs):.1f}"
            f" | {spread([p.server_cpu_s_per_audio_hour for p in runs], '.0f')}"
            f" | {spread([p.event_loop_share for p in runs], '.2f')}"
            f" | {spread([p.event_loop_us_per_frame for p in runs], '.0f')}"
            f" | {statistics.median(p.client_cpu_s for p in runs):.1f}"
            f" | {spread([p.throughput_rt for p in runs], '.2f')} |"
        )
    return "\n".join(lines)


def plot(points: list[Point], out: Path) -> list[Path]:
    """PNG plots against concurrency, one line per configuration, with min-max bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    metrics: list[tuple[str, str]] = [
        ("chunk_p95_ms", "p95 per-chunk latency (ms)"),
        ("server_cpu_s_per_audio_hour", "gateway CPU seconds per audio hour"),
        ("throughput_rt", "throughput (audio seconds decoded per second)"),
    ]
    for attribute, label in metrics:
        figure, axis = plt.subplots(figsize=(6, 4))
        for name in sorted({p.config for p in points}):
            levels = sorted({p.streams for p in points if p.config == name})
            values = [
                [getattr(p, attribute) for p in points if p.config == name and p.streams == s]
                for s in levels
            ]
            medians = [statistics.median(v) for v in values]
            low = [m - min(v) for m, v in zip(medians, values, strict=True)]
            high = [max(v) - m for m, v in zip(medians, values, strict=True)]
            axis.errorbar(levels, medians, yerr=[low, high], marker="o", capsize=3, label=name)
        if attribute.startswith("chunk_"):
            axis.set_yscale("log")  # from milliseconds to the seconds of an overload
        axis.set_xlabel("concurrent streams")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend()
        path = out / f"{attribute}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load.sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--replot", type=Path, help="redraw the plots of DIR/points.json")
    parser.add_argument(
        "--config",
        action="append",
        type=parse_config,
        help="NAME[@CHECKOUT]:VAR=VALUE;VAR=VALUE (repeatable)",
    )
    parser.add_argument("--streams", default="10,50,100", help="concurrency levels")
    parser.add_argument("--seconds", type=float, default=10.0, help="audio per stream")
    parser.add_argument("--ramp", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fast", action="store_true", help="send audio as fast as possible")
    parser.add_argument(
        "--arrivals",
        choices=["uniform", "random"],
        default="uniform",
        help="stream starts spread evenly over --ramp, or at random within it (bench.load.ws_load)",
    )
    parser.add_argument(
        "--mode",
        choices=["online", "2pass"],
        default="online",
        help="the streams' mode (2pass: speech with pauses, bench.load.ws_load)",
    )
    parser.add_argument(
        "--chunk-interval",
        type=int,
        default=10,
        help="frames per 600 ms chunk, as FunASR's clients send (10: 60 ms)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/run"))
    args = parser.parse_args(argv)
    if args.replot:
        saved = json.loads((args.replot / "points.json").read_text())["points"]
        for path in plot([Point(**p) for p in saved], args.replot):
            print(f"plot: {path}")
        return 0
    if not args.config:
        parser.error("--config is required")
    args.out.mkdir(parents=True, exist_ok=True)
    levels = [int(s) for s in args.streams.split(",")]
    points: list[Point] = []
    for config in args.config:
        gateway = start_gateway(config)
        try:
            for streams in levels:
                for repeat in range(args.repeat):
                    point = run_point(gateway, config, streams, repeat, args)
                    print(json.dumps(asdict(point)), file=sys.stderr)
                    points.append(point)
        finally:
            gateway.stop()
    payload: dict[str, Any] = {"argv": sys.argv, "points": [asdict(p) for p in points]}
    (args.out / "points.json").write_text(json.dumps(payload, indent=1))
    table = markdown(points)
    (args.out / "summary.md").write_text(table + "\n")
    print(table)
    for path in plot(points, args.out):
        print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
