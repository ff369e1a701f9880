"""Does a step cost more after the worker waited? The engine's CPU per row, steps back to
back against steps after a gap slept (or spun) away.

A worker under real-time load waits between steps for the next chunks. Were a step after a
wait slower (caches, branch predictors and TLBs cooled by whatever ran meanwhile), a worker
should spin rather than sleep, or hold its steps so that they run back to back.

    python -m bench.models.idle_gaps --batch 4 --gaps 0,5,20,50,100,300
    taskset -c 0 python -m bench.models.idle_gaps --beside-copy   # a memory-bound process
                                                                  # on the same core

``--beside-copy`` runs a process that streams 64 MB of memory on the same cores meanwhile:
what sleeping then lets run is what a worker would come back after.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from multiprocessing.synchronize import Event

import numpy as np

from bench.common.report import header
from bench.models.raw_ceiling import CHUNK_SAMPLES, CLIENT_CHUNK_SIZE, engine_spec
from shared.messages import StreamOptions
from workers.engines import load_engine
from workers.engines.base import ChunkItem


def _copy_memory(stop: Event) -> None:
    data = np.ones(8_000_000)  # 64 MB: far past the caches
    while not stop.is_set():
        data += 1


def measure(args: argparse.Namespace) -> list[tuple[str, int, float, float]]:
    engine = load_engine(engine_spec(args.model, args.engine, args.precision))
    audio = np.random.default_rng(0).normal(0, 3000, CHUNK_SAMPLES * 50).astype(np.int16)
    options = StreamOptions(
        chunk_size=CLIENT_CHUNK_SIZE, encoder_chunk_look_back=0, decoder_chunk_look_back=0
    )
    for stream in range(args.batch):
        engine.open_stream(stream, options)
    position = 0

    def step(seq: int) -> tuple[float, float]:
        nonlocal position
        items = []
        for stream in range(args.batch):
            start = (position + stream * CHUNK_SAMPLES) % (len(audio) - CHUNK_SAMPLES)
            items.append(ChunkItem(stream, seq, audio[start : start + CHUNK_SAMPLES], False))
        position += CHUNK_SAMPLES
        cpu, wall = time.process_time(), time.perf_counter()
        engine.feed(items)
        return (
            (time.process_time() - cpu) * 1000 / args.batch,
            (time.perf_counter() - wall) * 1000 / args.batch,
        )

    for seq in range(5):  # warm-up
        step(seq)
    rows = []
    for how in ("sleep", "spin"):
        for gap_ms in (int(g) for g in args.gaps.split(",")):
            cpu_ms, wall_ms = [], []
            for seq in range(args.steps):
                if how == "sleep":
                    time.sleep(gap_ms / 1000)
                else:
                    until = time.perf_counter() + gap_ms / 1000
                    while time.perf_counter() < until:
                        pass
                cpu, wall = step(seq)
                cpu_ms.append(cpu)
                wall_ms.append(wall)
            rows.append((how, gap_ms, statistics.median(cpu_ms), statistics.median(wall_ms)))
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.idle_gaps",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--engine", default="paraformer-onnx")
    parser.add_argument("--precision", choices=("fp32", "int8"), default="int8")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="steps per gap")
    parser.add_argument("--gaps", default="0,5,20,50,100,300", help="milliseconds")
    parser.add_argument("--beside-copy", action="store_true")
    args = parser.parse_args(argv)
    stop = multiprocessing.get_context("spawn").Event()
    copier = None
    if args.beside_copy:
        copier = multiprocessing.get_context("spawn").Process(target=_copy_memory, args=(stop,))
        copier.start()
    try:
        rows = measure(args)
    finally:
        stop.set()
        if copier is not None:
            copier.join()
    print("\n".join(header("between steps", "gap ms", "CPU ms per row", "wall ms per row")))
    for how, gap, cpu, wall in rows:
        print(f"| {how} | {gap} | {cpu:.1f} | {wall:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
