"""Load generator: N concurrent WebSocket streams against the gateway, FunASR's protocol.

Each stream sends a WAV file (16 kHz mono int16) or synthetic audio in frames of
``chunk_size[1] * 60 / chunk_interval`` ms, paced in real time (default) or as fast as the
server takes it, started over a ramp. Per stream it records:

- first-partial latency: first audio byte sent -> first partial received;
- per-chunk latency: the last byte of model chunk k sent -> the result for chunk k received
  (results carry ``seq``; the config asks for every chunk's result with ``"timing": true``);
- final latency: end message sent -> final result received;
- RTF: wall time from first byte to final, over the audio duration (meaningful with --fast),
  and the server's compute RTF (sum of ``compute_ms`` over the audio duration);
- the server's queue and compute time per chunk (``queue_ms``, ``compute_ms`` in results);
- errors, refusals (close 1013 / HTTP 503) and, with the checksum engine, verification.

``--mode 2pass`` (FunASR's default mode) sends synthetic speech with a 1.2 s pause every
3 s, so that the server's endpointer or VAD ends sentences. Partials (``2pass-online``)
count for the first-partial latency; per-chunk latency is left out (``seq`` counts from each
sentence's start, which the client cannot place); sentences (``2pass-offline``) are counted.
With ``--verify``, each sentence's last partial (the checksum engine's running value over
that sentence's streaming pass) must be the checksum of the next bytes sent, in order, and
the sentences together must be every byte: the audio was partitioned exactly.

``--protocol sherpa`` drives sherpa-onnx's online WebSocket server instead, the same audio
paced the same way (``bench.load.sherpa_stream`` says what differs in the measure); online
only, nothing to verify.

    python -m bench.load.ws_load --url ws://127.0.0.1:10095/ --streams 50 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.common.audio import load_audio
from bench.common.report import header
from bench.common.stats import Distribution, distribution
from bench.load.sherpa_stream import run_sherpa_stream
from bench.load.ws_stream import SAMPLE_RATE, StreamRecord, run_stream
from shared.gc_tuning import latency_tuned_gc


@dataclass(frozen=True, slots=True)
class LoadSummary:
    streams: int
    completed: int
    refused: int
    errors: int
    verified: int | None
    audio_seconds: float
    wall_seconds: float
    first_partial_ms: Distribution
    chunk_latency_ms: Distribution
    final_latency_ms: Distribution
    server_queue_ms: Distribution
    server_compute_ms: Distribution
    rtf_wall: Distribution
    rtf_compute: float
    client_cpu_seconds: float
    error_samples: list[str]
    sentences: int = 0


async def run_load(args: argparse.Namespace) -> list[StreamRecord]:
    records = [StreamRecord(i) for i in range(args.streams)]
    pauses = args.mode == "2pass"
    audios = [
        load_audio(args.wav, args.seconds, seed, pauses) for seed in range(min(args.streams, 8))
    ]
    progress = Progress(args.streams, quiet=args.quiet)
    stream = run_sherpa_stream if args.protocol == "sherpa" else run_stream

    # Uniform phases: stream i starts at i/N of the ramp (with a ramp of one chunk, every
    # phase of the chunk is taken once). Random: each start is drawn uniformly over the
    # ramp, so that starts, and the chunks after them, bunch up as real arrivals do.
    if args.arrivals == "random":
        starts = sorted(np.random.default_rng(args.seed).uniform(0, args.ramp, args.streams))
    else:
        starts = [args.ramp * i / max(1, args.streams) for i in range(args.streams)]

    async def one(i: int) -> None:
        await asyncio.sleep(starts[i])
        await stream(i, args, audios[i % len(audios)], records[i])
        progress.done(records[i])

    longest = max(len(a) for a in audios) / SAMPLE_RATE
    bound = longest + args.ramp + 2 * args.timeout + 60
    try:
        async with asyncio.timeout(bound), asyncio.TaskGroup() as group:
            for i in range(args.streams):
                group.create_task(one(i))
    except TimeoutError:
        for record in records:
            if record.wall_s is None and not record.refused and record.error is None:
                record.error = "no final result before the run's time bound"
    progress.close()
    return records


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet
        self.finished = self.failed = 0

    def done(self, record: StreamRecord) -> None:
        self.finished += 1
        self.failed += record.error is not None
        if not self.quiet:
            filled = int(30 * self.finished / self.total)
            bar = "#" * filled + "." * (30 - filled)
            print(
                f"\r[{bar}] {self.finished}/{self.total} streams, {self.failed} failed",
                end="",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if not self.quiet:
            print(file=sys.stderr)


def summarize(records: list[StreamRecord], wall: float, client_cpu: float) -> LoadSummary:
    completed = [r for r in records if r.wall_s is not None and r.error is None]
    audio_seconds = sum(r.audio_seconds for r in completed)
    compute_s = sum(sum(r.compute_ms) for r in completed) / 1000
    verified = [r.verified for r in records if r.verified is not None]
    return LoadSummary(
        streams=len(records),
        completed=len(completed),
        refused=sum(r.refused for r in records),
        errors=sum(r.error is not None for r in records),
        verified=sum(verified) if verified else None,
        audio_seconds=audio_seconds,
        wall_seconds=wall,
        first_partial_ms=distribution(
            [r.first_partial_s * 1e3 for r in completed if r.first_partial_s is not None]
        ),
        chunk_latency_ms=distribution([x * 1e3 for r in completed for x in r.chunk_latencies_s]),
        final_latency_ms=distribution([r.final_s * 1e3 for r in completed if r.final_s]),
        server_queue_ms=distribution([x for r in completed for x in r.queue_ms]),
        server_compute_ms=distribution([x for r in completed for x in r.compute_ms]),
        rtf_wall=distribution([r.wall_s / r.audio_seconds for r in completed if r.wall_s]),
        rtf_compute=compute_s / audio_seconds if audio_seconds else float("nan"),
        client_cpu_seconds=client_cpu,
        error_samples=sorted({r.error for r in records if r.error})[:5],
        sentences=sum(r.sentences for r in completed),
    )


def markdown(summary: LoadSummary) -> str:
    rows = [
        ("first partial (ms)", summary.first_partial_ms),
        ("per-chunk latency (ms)", summary.chunk_latency_ms),
        ("final latency (ms)", summary.final_latency_ms),
        ("server queue (ms)", summary.server_queue_ms),
        ("server compute (ms)", summary.server_compute_ms),
        ("RTF (wall)", summary.rtf_wall),
    ]
    lines = [
        f"streams {summary.streams}: {summary.completed} completed, {summary.refused} refused,"
        f" {summary.errors} errors"
        + (f", {summary.verified} verified" if summary.verified is not None else "")
        + (f", {summary.sentences} sentences" if summary.sentences else "")
        + f"; {summary.audio_seconds:.0f} s of audio in {summary.wall_seconds:.1f} s;"
        f" compute RTF {summary.rtf_compute:.3f}; client CPU {summary.client_cpu_seconds:.1f} s",
        "",
        *header("metric", "n", "mean", "p50", "p95", "p99", "max"),
    ]
    for name, d in rows:
        lines.append(
            f"| {name} | {d.count} | {d.mean:.1f} | {d.p50:.1f} | {d.p95:.1f}"
            f" | {d.p99:.1f} | {d.max:.1f} |"
        )
    if summary.error_samples:
        lines += ["", "errors: " + "; ".join(summary.error_samples)]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load.ws_load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", default="ws://127.0.0.1:10095/")
    parser.add_argument(
        "--protocol",
        choices=["funasr", "sherpa"],
        default="funasr",
        help="FunASR's (ours), or sherpa-onnx's online WebSocket server's",
    )
    parser.add_argument("--mode", choices=["online", "2pass"], default="online")
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--wav", type=Path, help="16 kHz mono int16 WAV (default: synthetic)")
    parser.add_argument("--seconds", type=float, default=10.0, help="synthetic audio length")
    parser.add_argument("--fast", action="store_true", help="send as fast as possible")
    parser.add_argument("--ramp", type=float, default=2.0, help="seconds to start all streams")
    parser.add_argument(
        "--arrivals",
        choices=["uniform", "random"],
        default="uniform",
        help="stream starts spread evenly over --ramp, or drawn at random within it",
    )
    parser.add_argument("--seed", type=int, default=0, help="the random arrivals' seed")
    parser.add_argument("--chunk-size", default="5,10,5")
    parser.add_argument("--chunk-interval", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=30.0, help="per-message timeout")
    parser.add_argument("--verify", action="store_true", help="check checksum-engine finals")
    parser.add_argument("--api-key")
    parser.add_argument("--json", type=Path, help="write the summary and per-stream records")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.protocol == "sherpa" and (args.mode != "online" or args.verify or args.api_key):
        parser.error("--protocol sherpa: online only, without --verify or --api-key")
    return args


def run(args: argparse.Namespace) -> tuple[LoadSummary, list[StreamRecord]]:
    cpu_before = time.process_time()
    started = time.perf_counter()
    # The generator's own collector pauses would show up as server latency. It shares the
    # server's cores: uvloop (uvicorn[standard] brings it) spends less of them per frame.
    with latency_tuned_gc(), asyncio.Runner(loop_factory=_loop_factory()) as runner:
        records = runner.run(run_load(args))
    wall = time.perf_counter() - started
    return summarize(records, wall, time.process_time() - cpu_before), records


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # a Windows or macOS load generator: asyncio's own loop
        return None
    return uvloop.new_event_loop


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    summary, records = run(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"summary": asdict(summary), "streams": [asdict(r) for r in records]}
        args.json.write_text(json.dumps(payload, indent=1))
    print(markdown(summary))
    return 0 if summary.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
