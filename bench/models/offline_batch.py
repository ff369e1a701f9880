"""The offline Paraformer's batching gain: N clips one call each, against batched calls.

One process, the engine the workers run (``paraformer-offline``), clips of equal length
(``--seconds``) and of mixed lengths; every configuration repeated. Prints the wall time
per clip and the speed-up of each batch size over one clip per call.

    python -m bench.models.offline_batch --model synthetic:large --clips 8 --batches 1,4,8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from bench.common.audio import clips
from shared.engines import Role
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from workers.engines.base import ChunkItem
from workers.engines.paraformer.offline import ParaformerOfflineEngine
from workers.models.resolve import resolve_model


def run(engine: ParaformerOfflineEngine, audio: list[np.ndarray], batch: int) -> float:
    """Seconds to decode every clip, ``batch`` finals per engine step."""
    started = time.perf_counter()
    for first in range(0, len(audio), batch):
        group = audio[first : first + batch]
        for i in range(len(group)):
            engine.open_stream(first + i, StreamOptions())
        engine.feed([ChunkItem(first + i, 0, clip, True) for i, clip in enumerate(group)])
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.offline_batch", description=__doc__
    )
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batches", default="1,4,8")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    resolved = resolve_model(args.model, PoolSettings().model_cache_dir, Role.OFFLINE)
    spec = EngineSpec("paraformer-offline", model_dir=resolved.model_dir, threads=args.threads)
    engine = ParaformerOfflineEngine.load(spec)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"{args.model} (offline), {args.clips} clips, {args.threads} thread(s)")
    print("| clips | batch | runs | ms per clip (median, min-max) | speed-up over batch 1 |")
    print("|---|---|---|---|---|")
    for mixed in (False, True):
        audio = clips(args.clips, args.seconds, mixed)
        run(engine, audio[:1], 1)  # warm-up
        base = 0.0
        for batch in batches:
            times = [run(engine, audio, batch) / len(audio) * 1000 for _ in range(args.repeat)]
            median = statistics.median(times)
            base = base or median
            label = (
                f"mixed {args.seconds * 0.5:g}-{args.seconds * 1.5:g} s"
                if mixed
                else (f"{args.seconds:g} s each")
            )
            print(
                f"| {label} | {batch} | {len(times)} | {median:.0f} ({min(times):.0f}-"
                f"{max(times):.0f}) | {base / median:.2f}x |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
