"""What FunASR's 2pass companions cost here: FSMN-VAD per 60 ms piece, punctuation per text.

The engines the workers run, in one process on one thread: ``fsmn-vad`` fed ``--streams``
streams of speech-and-pause audio in 60 ms pieces, round-robin as a worker sees live
sessions; the offline engine with and without ``ASR_PUNC_MODEL``'s CT-Transformer on the
same clips. Prints the CPU cost per piece and how many real-time streams one core keeps up
with, and the punctuation's share of an offline decode.

    python -m bench.models.companions --vad synthetic:tiny --punc synthetic:large \\
        --offline synthetic:large
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from bench.common.audio import speech_and_pauses
from shared.engines import Role
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from workers.engines.base import ChunkItem
from workers.engines.fsmn_vad.engine import FsmnVadEngine
from workers.engines.paraformer.offline import ParaformerOfflineEngine
from workers.models.resolve import resolve_model

PIECE = 960  # 60 ms


def vad_cost(model: str, cache: str, streams: int, seconds: float) -> None:
    resolved = resolve_model(model, cache, Role.VAD)
    engine = FsmnVadEngine.load(EngineSpec(engine="fsmn-vad", model_dir=resolved.model_dir))
    audio = [speech_and_pauses(seconds, seed) for seed in range(streams)]
    for stream in range(streams):
        engine.open_stream(stream, StreamOptions())
    pieces = 0
    cpu = time.process_time()
    wall = time.perf_counter()
    for seq, start in enumerate(range(0, len(audio[0]), PIECE)):
        for stream in range(streams):
            piece = audio[stream][start : start + PIECE]
            engine.feed([ChunkItem(stream, seq, piece, False)])
            pieces += 1
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - wall
    per_piece_ms = cpu / pieces * 1000
    print(
        f"fsmn-vad ({resolved.description}): {pieces} pieces of 60 ms over {streams} streams;"
        f" {per_piece_ms:.2f} ms CPU per piece (wall {wall / pieces * 1000:.2f} ms);"
        f" one core keeps up with {60 / per_piece_ms:.0f} real-time streams"
    )


def punc_cost(offline: str, punc: str, cache: str, clips: int, seconds: float) -> None:
    model = resolve_model(offline, cache, Role.OFFLINE).model_dir
    punc_dir = resolve_model(punc, cache, Role.PUNCTUATION).model_dir
    plain = ParaformerOfflineEngine.load(EngineSpec(engine="paraformer-offline", model_dir=model))
    with_punc = ParaformerOfflineEngine.load(
        EngineSpec(engine="paraformer-offline", model_dir=model, punc_model_dir=punc_dir)
    )
    audio = [speech_and_pauses(seconds, 100 + i) for i in range(clips)]
    times: dict[str, list[float]] = {"plain": [], "punctuated": []}
    for name, engine in (("plain", plain), ("punctuated", with_punc)):
        for repeat in range(2):
            for i, clip in enumerate(audio):
                engine.open_stream(i + 1000 * repeat, StreamOptions())
                started = time.perf_counter()
                engine.feed([ChunkItem(i + 1000 * repeat, 0, clip, True)])
                if repeat:  # the first round warms up
                    times[name].append(time.perf_counter() - started)
    base, punctuated = statistics.median(times["plain"]), statistics.median(times["punctuated"])
    print(
        f"offline decode of a {seconds:g} s clip: {base * 1000:.0f} ms; with punctuation"
        f" {punctuated * 1000:.0f} ms (+{(punctuated - base) * 1000:.0f} ms), medians of {clips}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models.companions", description=__doc__)
    parser.add_argument("--vad", default="synthetic:tiny")
    parser.add_argument("--punc", default="synthetic:tiny")
    parser.add_argument("--offline", default="synthetic:tiny")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clips", type=int, default=4)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cache = PoolSettings().model_cache_dir
    vad_cost(args.vad, cache, args.streams, args.seconds)
    punc_cost(args.offline, args.punc, cache, args.clips, min(args.seconds, 10.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
