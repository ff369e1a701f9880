"""An engine at the batches a worker really gets: a different size every step.

``bench.models.raw_ceiling`` feeds the same batch every step, the best case. A worker's
steps take whatever chunks are waiting, 1 to 16 of them here, drawn at random (seeded, the
same draws for every engine), so a runtime that prepares its kernels per input shape pays
for each new shape. Per engine, in a process of its own (one thread): CPU ms per
stream-chunk over each of two passes of ``--steps`` steps (the second has seen the
shapes), the slowest step's ms per chunk, and the resident memory at the end.

    python -m bench.models.varied_batches --engines paraformer-onnx,paraformer-openvino \\
        --precision int8 --steps 150
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time

import numpy as np

from bench.common import procfs
from bench.common.report import header, row
from bench.models.raw_ceiling import CHUNK_SAMPLES, CLIENT_CHUNK_SIZE, engine_spec, look_back_of
from shared.engines import Precision
from shared.messages import StreamOptions
from workers.engines import load_engine
from workers.engines.base import ChunkItem

STREAMS = 16


def _drive(
    model: str, runtime: str, precision: Precision, steps: int, out: multiprocessing.Queue[str]
) -> None:
    engine = load_engine(engine_spec(model, runtime, precision))
    encoder_look_back, decoder_look_back = look_back_of(runtime)
    options = StreamOptions(CLIENT_CHUNK_SIZE, encoder_look_back, decoder_look_back)
    for stream in range(STREAMS):
        engine.open_stream(stream, options)
    rng = np.random.default_rng(0)
    audio = rng.normal(0, 3000, CHUNK_SAMPLES * 50).astype(np.int16)
    positions = [0] * STREAMS
    cells = [runtime]
    for _ in range(2):
        chunks, slowest = 0, 0.0
        started = time.process_time()
        for step in range(steps):
            size = int(rng.integers(1, STREAMS + 1))
            items = []
            for stream in rng.choice(STREAMS, size, replace=False):
                start = positions[stream] % (len(audio) - CHUNK_SAMPLES)
                items.append(
                    ChunkItem(int(stream), step, audio[start : start + CHUNK_SAMPLES], False)
                )
                positions[stream] += CHUNK_SAMPLES
            step_started = time.perf_counter()
            engine.feed(items)
            slowest = max(slowest, (time.perf_counter() - step_started) * 1000 / size)
            chunks += size
        cells += [f"{(time.process_time() - started) / chunks * 1000:.1f}", f"{slowest:.0f}"]
    cells.append(f"{procfs.rss_kib() / 1024:.0f}")
    out.put(row(*cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.varied_batches",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--engines", default="paraformer-onnx,paraformer-openvino")
    parser.add_argument("--precision", choices=("fp32", "int8"), default="int8")
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args(argv)
    context = multiprocessing.get_context("spawn")
    lines = header(
        "engine",
        "pass 1: CPU ms per chunk",
        "pass 1: slowest step, ms per chunk",
        "pass 2: CPU ms per chunk",
        "pass 2: slowest step, ms per chunk",
        "RSS MiB",
    )
    for runtime in args.engines.split(","):  # one after the other: each has the cores
        out: multiprocessing.Queue[str] = context.Queue()
        process = context.Process(
            target=_drive, args=(args.model, runtime, args.precision, args.steps, out)
        )
        process.start()
        lines.append(out.get(timeout=1800))
        process.join()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
