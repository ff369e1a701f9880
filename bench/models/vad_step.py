"""The VAD pool's CPU per stream: ``fsmn-vad`` (funasr, stream by stream) against
``fsmn-vad-onnx`` (one step for all of a worker's streams).

Both engines in one process, one thread each (torch's and ONNX Runtime's), fed as a worker
feeds them: every step holds one 60 ms piece of each of ``N`` streams of speech and pauses.
For each ``N`` prints the CPU per 600 ms of audio per stream (the median of ``--repeat``
runs, the engines taking turns), the speed-up, the new engine's time per step, and whether
the two engines' segments were the same.

    python -m bench.models.vad_step --model synthetic:tiny --streams 1 8 16 32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from bench.common.audio import speech_and_pauses
from shared.engines import EngineName, Role
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from workers.engines import load_engine
from workers.engines.base import ChunkItem, Engine
from workers.models.resolve import resolve_model

PIECE = 960  # 60 ms
PER = 0.6  # seconds of audio the cost is given for


@dataclass(frozen=True, slots=True)
class Run:
    cpu_s: float
    wall_s: float
    steps: int
    segments: list[tuple[tuple[int, int], ...]]


def run(engine: Engine, audio: list[np.ndarray], first_id: int) -> Run:
    for stream in range(len(audio)):
        engine.open_stream(first_id + stream, StreamOptions())
    segments: list[tuple[tuple[int, int], ...]] = []
    steps = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for seq, start in enumerate(range(0, len(audio[0]), PIECE)):
        final = start + PIECE >= len(audio[0])
        items = [
            ChunkItem(first_id + s, seq, pcm[start : start + PIECE], final)
            for s, pcm in enumerate(audio)
        ]
        segments += [output.decoded.segments for output in engine.feed(items)]
        steps += 1
    return Run(time.process_time() - cpu, time.perf_counter() - wall, steps, segments)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models.vad_step", description=__doc__)
    parser.add_argument("--model", default="synthetic:tiny", help="ASR_VAD_MODEL's forms")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 16, 32])
    parser.add_argument("--seconds", type=float, default=6.0, help="audio per stream")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    model_dir = resolve_model(args.model, PoolSettings().model_cache_dir, Role.VAD).model_dir
    engines = {
        name: load_engine(EngineSpec(engine=name, model_dir=model_dir, threads=1))
        for name in ("fsmn-vad", "fsmn-vad-onnx")
    }
    print(f"model {args.model}; {args.seconds:g} s per stream, in 60 ms pieces; one thread")
    print(
        "| streams | fsmn-vad CPU ms / 600 ms / stream | fsmn-vad-onnx CPU ms / 600 ms / stream"
        " | speed-up | fsmn-vad-onnx ms per step | same segments |"
    )
    print("|---:|---:|---:|---:|---:|---|")
    next_id = 0
    for engine in engines.values():  # a warm-up: first calls allocate
        run(engine, [speech_and_pauses(1.0, 0)], next_id)
        next_id += 1
    for streams in args.streams:
        audio = [speech_and_pauses(args.seconds, seed) for seed in range(streams)]
        runs: dict[EngineName, list[Run]] = {name: [] for name in engines}
        for _ in range(args.repeat):
            for name, engine in engines.items():
                runs[name].append(run(engine, audio, next_id))
                next_id += streams
        per_stream = {
            name: statistics.median(r.cpu_s for r in done) * 1000 / streams / (args.seconds / PER)
            for name, done in runs.items()
        }
        onnx = runs["fsmn-vad-onnx"]
        step_ms = statistics.median(r.wall_s / r.steps for r in onnx) * 1000
        same = all(a.segments == b.segments for a, b in zip(runs["fsmn-vad"], onnx, strict=True))
        torch_ms, onnx_ms = per_stream["fsmn-vad"], per_stream["fsmn-vad-onnx"]
        print(
            f"| {streams} | {torch_ms:.2f} | {onnx_ms:.2f} | {torch_ms / onnx_ms:.1f}x"
            f" | {step_ms:.2f} | {'yes' if same else 'NO'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
