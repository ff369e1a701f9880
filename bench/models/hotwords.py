"""What hotwords cost a SeACo-Paraformer decode: clips without words and with N of them.

One process, the engine the workers run (``paraformer-offline``), ``--clips`` clips of
``--seconds`` each, ended together in one engine step (``--batch`` at a time, the same words
for all: they share calls). Words are 2 to 4 characters of the model's vocabulary. From 50
words funasr first filters them down to 50 (an extra pass of the bias decoder) and the engine
decodes such clips one per call. Prints the wall time per clip and the ratio to no words.

    python -m bench.models.hotwords --model synthetic-seaco:large --words 0,10,49,50,256
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench.common.audio import clips
from shared.engines import Role
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from workers.engines.base import ChunkItem
from workers.engines.paraformer.offline import ParaformerOfflineEngine
from workers.models.resolve import resolve_model


def words(model_dir: Path, count: int) -> tuple[str, ...]:
    tokens = json.loads((model_dir / "tokens.json").read_text())
    characters = [t for t in tokens if not t.startswith("<")]
    rng = np.random.default_rng(count)
    return tuple(
        "".join(rng.choice(characters, size=int(rng.integers(2, 5)))) for _ in range(count)
    )


def run(
    engine: ParaformerOfflineEngine,
    audio: list[np.ndarray],
    batch: int,
    hotwords: tuple[str, ...],
) -> float:
    """Seconds to decode every clip, ``batch`` finals per engine step."""
    started = time.perf_counter()
    for first in range(0, len(audio), batch):
        group = audio[first : first + batch]
        for i in range(len(group)):
            engine.open_stream(first + i, StreamOptions(hotwords=hotwords))
        outputs = engine.feed([ChunkItem(first + i, 0, c, True) for i, c in enumerate(group)])
        failed = [o.error for o in outputs if o.error is not None]
        if failed:
            raise RuntimeError(failed[0])
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models.hotwords", description=__doc__)
    parser.add_argument("--model", default="synthetic-seaco:large")
    parser.add_argument("--clips", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--words", default="0,10,49,50,256")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    resolved = resolve_model(args.model, PoolSettings().model_cache_dir, Role.OFFLINE)
    assert resolved.model_dir is not None
    spec = EngineSpec("paraformer-offline", model_dir=resolved.model_dir, threads=args.threads)
    engine = ParaformerOfflineEngine.load(spec)
    audio = clips(args.clips, args.seconds, mixed=False)
    print(
        f"{args.model}, {args.clips} clips of {args.seconds:g} s, batch {args.batch},"
        f" {args.threads} thread(s)"
    )
    print("| hotwords | runs | ms per clip (median, min-max) | over no words |")
    print("|---|---|---|---|")
    run(engine, audio[:1], 1, ())  # warm-up
    base = 0.0
    for count in (int(c) for c in args.words.split(",")):
        hotwords = words(Path(resolved.model_dir), count)
        times = [
            run(engine, audio, args.batch, hotwords) / len(audio) * 1000 for _ in range(args.repeat)
        ]
        median = statistics.median(times)
        base = base or median
        print(
            f"| {count} | {len(times)} | {median:.0f} ({min(times):.0f}-{max(times):.0f}) |"
            f" {median / base:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
