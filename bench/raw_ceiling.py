"""The raw ceiling: an engine driven in a tight loop in P processes, with no gateway at all.

Each process loads the same engine the workers load (``workers.engines.load_engine``), opens
S streams, and feeds them 600 ms chunks round robin, one chunk per stream per step (as a
worker does under load), for ``--seconds``. The ceiling is the audio it decodes per second
of wall time, i.e. how many real-time streams the machine could serve at best; the gateway's
efficiency is its throughput at saturation over this.

    python -m bench.raw_ceiling --model synthetic:large --processes 1,2 --seconds 30
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from multiprocessing.synchronize import Barrier

import numpy as np

from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from workers.engines import load_engine
from workers.engines.base import ChunkItem
from workers.models import resolve_model

CHUNK_SAMPLES = 9600


@dataclass(frozen=True, slots=True)
class CeilingRun:
    model: str
    processes: int
    repeat: int
    audio_s: float
    wall_s: float
    realtime_streams: float  # audio seconds decoded per wall second, all processes
    chunk_ms_mean: float


def _drive(
    spec: EngineSpec,
    streams: int,
    seconds: float,
    barrier: Barrier,
    results: multiprocessing.Queue[tuple[float, float, float]],
) -> None:
    engine = load_engine(spec)
    rng = np.random.default_rng(0)
    audio = (rng.normal(0, 3000, CHUNK_SAMPLES * 50)).astype(np.int16)
    options = StreamOptions()
    for stream in range(streams):
        engine.open_stream(stream, options)
    positions = [0] * streams
    barrier.wait()
    started = time.perf_counter()
    chunks = 0
    while time.perf_counter() - started < seconds:
        items = []
        for stream in range(streams):
            start = positions[stream] % (len(audio) - CHUNK_SAMPLES)
            items.append(ChunkItem(stream, chunks, audio[start : start + CHUNK_SAMPLES], False))
            positions[stream] += CHUNK_SAMPLES
        engine.feed(items)
        chunks += streams
    wall = time.perf_counter() - started
    results.put((chunks * CHUNK_SAMPLES / 16000, wall, wall / chunks * 1000))


def measure(
    model: str, processes: int, streams: int, seconds: float, threads: int, repeat: int
) -> CeilingRun:
    resolved = resolve_model(model, PoolSettings().model_cache_dir)
    spec = EngineSpec(resolved.engine, "cpu", resolved.model_dir, threads=threads)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results: multiprocessing.Queue[tuple[float, float, float]] = context.Queue()
    workers = [
        context.Process(target=_drive, args=(spec, streams, seconds, barrier, results))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=seconds + 600) for _ in workers]
    for worker in workers:
        worker.join()
    audio = sum(o[0] for o in outcomes)
    wall = max(o[1] for o in outcomes)
    return CeilingRun(
        model, processes, repeat, audio, wall, audio / wall, statistics.mean(o[2] for o in outcomes)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.raw_ceiling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--streams", type=int, default=4, help="streams per process")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    runs = []
    for processes in (int(p) for p in args.processes.split(",")):
        for repeat in range(args.repeat):
            run = measure(args.model, processes, args.streams, args.seconds, args.threads, repeat)
            print(json.dumps(asdict(run)), file=sys.stderr)
            runs.append(run)
    print("| model | processes | runs | real-time streams (median, min-max) | ms per chunk |")
    print("|---|---|---|---|---|")
    for processes in sorted({r.processes for r in runs}):
        mine = [r.realtime_streams for r in runs if r.processes == processes]
        chunk = statistics.median(r.chunk_ms_mean for r in runs if r.processes == processes)
        print(
            f"| {args.model} | {processes} | {len(mine)} | {statistics.median(mine):.2f}"
            f" ({min(mine):.2f}-{max(mine):.2f}) | {chunk:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
