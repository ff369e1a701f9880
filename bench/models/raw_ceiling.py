"""The raw ceiling: an engine driven in a tight loop in P processes, with no gateway at all.

Each process loads the same engine the workers load (``workers.engines.load_engine``), opens
S streams, and feeds them 600 ms chunks round robin, one chunk per stream per step (as a
worker does under load), for ``--seconds``. The ceiling is the audio it decodes per second
of wall time, i.e. how many real-time streams the machine could serve at best; the gateway's
efficiency is its throughput at saturation over this.

    python -m bench.models.raw_ceiling --model synthetic:large --processes 1,2 --seconds 30
    python -m bench.models.raw_ceiling --engine paraformer-onnx --precision int8 --streams 8
    python -m bench.models.raw_ceiling --engine paraformer-onnx --device cuda:0 --streams 64
    python -m bench.models.raw_ceiling --engine paraformer-onnx,paraformer-openvino \
        --precision int8 --streams 8 --processes 2    # side by side, repeats interleaved

The ONNX engines' export is made first where it is missing (as a pool's start makes it);
with them, ``--streams`` is the batch of each step. Each process also reports its resident
memory at the end of the run.
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

from bench.common import procfs
from shared.engines import RUNTIME_ALIASES, RUNTIMES, Precision
from shared.env import RuntimeName
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from workers.engines import load_engine, needs_onnx_export, select_engine
from workers.engines.base import ChunkItem
from workers.models.resolve import resolve_model

CHUNK_SAMPLES = 9600
# What FunASR's clients send and the gateway decodes: 5 frames of look-back context and 5 of
# look-ahead around each 10 (the funasr library's own default, 0,10,5, encodes 15 frames a
# chunk instead of 20, and so measured a ceiling ~1.3x what a client can be served).
CLIENT_CHUNK_SIZE = (5, 10, 5)


@dataclass(frozen=True, slots=True)
class CeilingRun:
    model: str
    engine: str
    streams: int  # per process: the batch of each step
    processes: int
    repeat: int
    audio_s: float
    wall_s: float
    realtime_streams: float  # audio seconds decoded per wall second, all processes
    chunk_ms_mean: float
    rss_mib_max: float  # the largest resident set of the processes, at the end of the run


def _drive(
    spec: EngineSpec,
    spec_look_back: tuple[int, int],
    chunk_size: tuple[int, int, int],
    streams: int,
    seconds: float,
    barrier: Barrier,
    results: multiprocessing.Queue[tuple[float, float, float, float]],
) -> None:
    engine = load_engine(spec)
    rng = np.random.default_rng(0)
    audio = (rng.normal(0, 3000, CHUNK_SAMPLES * 50)).astype(np.int16)
    # Look-back 0/0: what the ONNX graphs decode with; the PyTorch engine is measured at its
    # own default unless the caller's spec says otherwise (see --look-back).
    options = StreamOptions(
        chunk_size=chunk_size,
        encoder_chunk_look_back=spec_look_back[0],
        decoder_chunk_look_back=spec_look_back[1],
    )
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
    rss_kib = procfs.rss_kib()
    results.put((chunks * CHUNK_SAMPLES / 16000, wall, wall / chunks * 1000, rss_kib / 1024))


def engine_spec(
    model: str, runtime: str, precision: Precision, device: str = "cpu", threads: int = 1
) -> EngineSpec:
    """What a worker of ``runtime`` would load for ``model``, its export made first where it
    loads one (as a pool's start makes it)."""
    import asyncio

    from workers.pool.prepare import ensure_engine_export

    resolved = resolve_model(model, PoolSettings().model_cache_dir)
    engine = select_engine(resolved.kind, RuntimeName().parse(runtime))  # checksum stays
    asyncio.run(ensure_engine_export(engine, resolved.model_dir, precision))
    return EngineSpec(engine, device, resolved.model_dir, threads=threads, precision=precision)


def measure(
    model: str,
    runtime: str,
    precision: Precision,
    look_back: tuple[int, int],
    processes: int,
    streams: int,
    seconds: float,
    threads: int,
    repeat: int,
    device: str = "cpu",
    chunk_size: tuple[int, int, int] = CLIENT_CHUNK_SIZE,
) -> CeilingRun:
    spec = engine_spec(model, runtime, precision, device, threads)
    engine = spec.engine
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results: multiprocessing.Queue[tuple[float, float, float, float]] = context.Queue()
    workers = [
        context.Process(
            target=_drive, args=(spec, look_back, chunk_size, streams, seconds, barrier, results)
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=seconds + 600) for _ in workers]
    for worker in workers:
        worker.join()
    audio = sum(o[0] for o in outcomes)
    wall = max(o[1] for o in outcomes)
    label = f"{engine} {precision}" if needs_onnx_export(engine) else engine
    return CeilingRun(
        model,
        label,
        streams,
        processes,
        repeat,
        audio,
        wall,
        audio / wall,
        statistics.mean(o[2] for o in outcomes),
        max(o[3] for o in outcomes),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.raw_ceiling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--streams", type=int, default=4, help="streams per process")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N, as ASR_DEVICES")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--engine",
        default="paraformer",
        help=f"a runtime ({', '.join(RUNTIMES)}; or its old name: {', '.join(RUNTIME_ALIASES)}),"
        " or several, comma-separated, measured in turns",
    )
    parser.add_argument("--precision", choices=("fp32", "int8"), default="fp32")
    parser.add_argument(
        "--chunk-size",
        default="5,10,5",
        help="the streams' chunk_size (default: FunASR's clients'; funasr's own is 0,10,5)",
    )
    parser.add_argument(
        "--look-back",
        default=None,
        help="encoder,decoder chunk look-back (default: 4,1 for paraformer, 0,0 for onnx)",
    )
    args = parser.parse_args(argv)
    engines = args.engine.split(",")
    if unknown := set(engines) - set(RUNTIMES) - set(RUNTIME_ALIASES):
        parser.error(f"unknown runtime {', '.join(sorted(unknown))}; known: {', '.join(RUNTIMES)}")
    a, b, c = (int(v) for v in args.chunk_size.split(","))
    chunk_size = (a, b, c)
    runs = []
    for processes in (int(p) for p in args.processes.split(",")):
        for repeat in range(args.repeat):
            for runtime in engines:  # in turns: a noisy minute hits each engine alike
                run = measure(
                    args.model,
                    runtime,
                    args.precision,
                    look_back_of(runtime, args.look_back),
                    processes,
                    args.streams,
                    args.seconds,
                    args.threads,
                    repeat,
                    args.device,
                    chunk_size,
                )
                print(json.dumps(asdict(run)), file=sys.stderr)
                runs.append(run)
    print(
        "| model | engine | batch | processes | runs | real-time streams (median, min-max)"
        " | ms per stream-chunk | RSS MiB per process |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for processes, engine in sorted({(r.processes, r.engine) for r in runs}):
        mine = [r for r in runs if (r.processes, r.engine) == (processes, engine)]
        streams = [r.realtime_streams for r in mine]
        chunk = statistics.median(r.chunk_ms_mean for r in mine)
        rss = max(r.rss_mib_max for r in mine)
        print(
            f"| {args.model} | {mine[0].engine} | {args.streams} | {processes} | {len(mine)}"
            f" | {statistics.median(streams):.2f} ({min(streams):.2f}-{max(streams):.2f})"
            f" | {chunk:.1f} | {rss:.0f} |"
        )
    return 0


def look_back_of(runtime: str, given: str | None = None) -> tuple[int, int]:
    """The encoder and decoder look-back to measure ``runtime`` at: ``given`` ("4,1"), else
    what it decodes with (the ONNX graphs carry no look-back; PyTorch's default is 4,1)."""
    if given is None:
        return (4, 1) if RuntimeName().parse(runtime) == "torch" else (0, 0)
    encoder, decoder = (int(v) for v in given.split(","))
    return encoder, decoder


if __name__ == "__main__":
    sys.exit(main())
