"""How the ONNX engine's text compares: with PyTorch, batched with single, int8 with fp32.

On one model directory (exported already: ``python -m workers.models.export DIR --int8``):

- fp32 ONNX against the PyTorch engine with look-back 0/0, chunk by chunk, one stream at a
  time: streams whose every chunk's text is equal.
- batched against single-stream, fp32 and int8: 8 streams of different lengths, two
  starting at each step, so that streams in one call emit different numbers of tokens.
- int8 against fp32: the similarity of the whole texts (difflib ratio) and the share of
  chunks whose text differs.

    python -m bench.models.onnx_fidelity --model synthetic:large --streams 8
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

import numpy as np

from bench.common.audio import chunks_of_tone
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from workers.engines.base import ChunkItem
from workers.engines.paraformer.streaming import ParaformerStreamingEngine
from workers.engines.paraformer.streaming_onnx import ParaformerOnnxEngine
from workers.models.resolve import resolve_model

CHUNK = 9600
OPTIONS = StreamOptions(chunk_size=(5, 10, 5), encoder_chunk_look_back=0, decoder_chunk_look_back=0)
Engine = ParaformerOnnxEngine | ParaformerStreamingEngine


def pieces(audio: np.ndarray) -> list[np.ndarray]:
    return [audio[i : i + CHUNK] for i in range(0, len(audio), CHUNK)]


def alone(engine: Engine, audio: np.ndarray, stream_id: int) -> list[str]:
    engine.open_stream(stream_id, OPTIONS)
    cut = pieces(audio)
    return [
        engine.feed([ChunkItem(stream_id, k, p, k == len(cut) - 1)])[0].text
        for k, p in enumerate(cut)
    ]


def batched(engine: ParaformerOnnxEngine, audios: list[np.ndarray]) -> list[list[str]]:
    texts: list[list[str]] = [[] for _ in audios]
    for s in range(len(audios)):
        engine.open_stream(10_000 + s, OPTIONS)
    step = 0
    while any(len(texts[s]) < len(pieces(a)) for s, a in enumerate(audios)):
        items = []
        for s, audio in enumerate(audios):
            cut = pieces(audio)
            k = step - s // 2
            if 0 <= k < len(cut):
                items.append(ChunkItem(10_000 + s, k, cut[k], k == len(cut) - 1))
        for output in engine.feed(items):
            texts[output.stream_id - 10_000].append(output.text)
        step += 1
    return texts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.onnx_fidelity", description=__doc__
    )
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--streams", type=int, default=8)
    args = parser.parse_args(argv)
    resolved = resolve_model(args.model, PoolSettings().model_cache_dir)
    assert resolved.model_dir is not None
    model_dir = Path(resolved.model_dir)
    audios = [chunks_of_tone(100 + s) for s in range(args.streams)]
    fp32 = ParaformerOnnxEngine(model_dir, "fp32", "cpu", 1)
    int8 = ParaformerOnnxEngine(model_dir, "int8", "cpu", 1)
    torch_engine = ParaformerStreamingEngine.load(
        EngineSpec("paraformer", model_dir=str(model_dir))
    )
    reference = [alone(torch_engine, a, s) for s, a in enumerate(audios)]
    fp32_alone = [alone(fp32, a, s) for s, a in enumerate(audios)]
    int8_alone = [alone(int8, a, s) for s, a in enumerate(audios)]
    fp32_batched = batched(fp32, audios)
    int8_batched = batched(int8, audios)
    n = len(audios)
    chunks = sum(len(t) for t in reference)
    tokens = sum(len("".join(t)) for t in reference)
    differing = sum(
        a != b
        for x, y in zip(fp32_alone, int8_alone, strict=True)
        for a, b in zip(x, y, strict=True)
    )
    similarity = difflib.SequenceMatcher(
        None, "".join("".join(t) for t in fp32_alone), "".join("".join(t) for t in int8_alone)
    ).ratio()
    print(f"{args.model}: {n} streams, {chunks} chunks, {tokens} tokens (PyTorch)")
    rows = [
        ("ONNX fp32 vs PyTorch, look-back 0/0", fp32_alone, reference),
        ("ONNX fp32 batched vs fp32 alone", fp32_batched, fp32_alone),
        ("ONNX int8 batched vs int8 alone", int8_batched, int8_alone),
        ("ONNX int8 alone vs fp32 alone", int8_alone, fp32_alone),
    ]
    print("| comparison | streams with every chunk equal |")
    print("|---|---|")
    for name, ours, theirs in rows:
        equal = sum(a == b for a, b in zip(ours, theirs, strict=True))
        print(f"| {name} | {equal}/{n} |")
    print(f"\nint8 against fp32: {differing}/{chunks} chunks differ; similarity {similarity:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
