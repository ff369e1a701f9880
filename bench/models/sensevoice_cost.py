"""What a SenseVoiceSmall decode costs, as the ``sensevoice`` engine runs it (funasr's
``generate``, PyTorch), and what funasr's own ONNX export of the same model would.

    python -m bench.models.sensevoice_cost --size large --threads 2

The model is the synthetic build of the real architecture (``synthetic-sensevoice:SIZE``,
random weights: the compute is the real model's, the text is not). For utterances of 5 s
and 15 s, alone and four at once in one call: wall ms per call and per utterance (median of
``--repeats``), and the real-time factor. Then the ONNX part: funasr's ``export``
(``SenseVoiceSmall.export``, its ``export_meta``), timed, and ONNX Runtime on the same
features against PyTorch's encoder and CTC head: ms per call, and whether the greedy CTC
tokens agree.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common.report import header, row
from shared.settings import PoolSettings
from workers.engines.paraformer.streaming import load_automodel
from workers.models.resolve import ensure_synthetic

RATE = 16000


def speech_like(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    tone = 0.2 * np.sin(2 * np.pi * (180 + 40 * seed) * t) * (1 + np.sin(2 * np.pi * 3 * t))
    clip: np.ndarray = (tone + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
    return clip


def timed(call: Any, repeats: int) -> float:
    """Median wall ms of ``call()`` after one warm-up."""
    call()
    walls = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        walls.append((time.perf_counter() - started) * 1000)
    return float(np.median(walls))


def torch_rows(model: Any, repeats: int) -> list[str]:
    lines = header(
        "utterances in the call", "seconds each", "ms per call", "ms per utterance", "RTF"
    )
    for seconds in (5.0, 15.0):
        for batch in (1, 4):
            clips = [speech_like(seconds, seed) for seed in range(batch)]

            def call(clips: list[np.ndarray] = clips) -> None:
                model.generate(input=clips, batch_size=len(clips), language="auto", use_itn=True)

            ms = timed(call, repeats)
            per = ms / batch
            lines.append(
                row(batch, seconds, f"{ms:.0f}", f"{per:.0f}", f"{per / 1000 / seconds:.3f}")
            )
    return lines


def onnx_rows(model: Any, repeats: int, threads: int) -> list[str]:
    """funasr's export of the same model, and ONNX Runtime against PyTorch on one 5 s clip."""
    import onnxruntime
    import torch
    from funasr.utils.load_utils import extract_fbank

    inner = model.model
    frontend = model.kwargs["frontend"]
    speech, lengths = extract_fbank([speech_like(5.0, 0)], data_type="sound", frontend=frontend)
    language = torch.tensor([0], dtype=torch.int32)
    textnorm = torch.tensor([14], dtype=torch.int32)
    with torch.no_grad():
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "model.onnx"
            rebuilt = inner.export(type="onnx", max_seq_len=512)
            torch.onnx.export(
                rebuilt,
                rebuilt.export_dummy_inputs(),
                str(path),
                dynamo=False,
                opset_version=14,
                input_names=rebuilt.export_input_names(),
                output_names=rebuilt.export_output_names(),
                dynamic_axes=rebuilt.export_dynamic_axes(),
            )
            export_s = time.perf_counter() - started
            size_mb = path.stat().st_size / 1e6
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            session = onnxruntime.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
            feeds = {
                "speech": speech.numpy(),
                "speech_lengths": lengths.numpy().astype(np.int32),
                "language": language.numpy(),
                "textnorm": textnorm.numpy(),
            }
            onnx_ms = timed(lambda: session.run(None, feeds), repeats)
            onnx_logits = session.run(None, feeds)[0]
        torch_ms = timed(lambda: rebuilt(speech, lengths, language, textnorm), repeats)
        torch_logits = rebuilt(speech, lengths, language, textnorm)[0].numpy()
    agree = float(np.mean(onnx_logits.argmax(-1) == torch_logits.argmax(-1)))
    lines = header("5 s clip, encoder and CTC head", "ms per call")
    lines.append(row("PyTorch (funasr's export module)", f"{torch_ms:.0f}"))
    lines.append(row("ONNX Runtime (CPU)", f"{onnx_ms:.0f}"))
    lines.append("")
    lines.append(f"- export: {export_s:.1f} s, {size_mb:.0f} MB (fp32)")
    lines.append(f"- greedy CTC tokens equal on {agree:.1%} of the frames")
    return lines


def engine_rows(model_dir: Path, repeats: int, threads: int) -> list[str]:
    """The two engines as a worker runs them (frontend, model, decode, tags): ``sensevoice``
    (PyTorch) against ``sensevoice-onnx`` (the export above, written where the pool keeps
    it), the same utterances."""
    from shared.messages import EngineSpec, StreamOptions
    from workers.engines.base import ChunkItem
    from workers.engines.sensevoice.engine import SenseVoiceEngine
    from workers.engines.sensevoice.onnx_engine import SenseVoiceOnnxEngine
    from workers.models.export.offline import export_offline

    export_offline(model_dir, threads=threads)
    engines = {
        "sensevoice (PyTorch)": SenseVoiceEngine.load(
            EngineSpec("sensevoice", model_dir=str(model_dir), threads=threads)
        ),
        "sensevoice-onnx": SenseVoiceOnnxEngine.load(
            EngineSpec("sensevoice-onnx", model_dir=str(model_dir), threads=threads)
        ),
    }
    lines = header("engine", "utterances per step", "seconds each", "ms per utterance")
    stream = iter(range(1 << 30))
    for name, engine in engines.items():
        for batch in (1, 4):
            clips = [(speech_like(5.0, seed) * 32767).astype(np.int16) for seed in range(batch)]

            def step(engine: Any = engine, clips: list[np.ndarray] = clips) -> None:
                items = []
                for audio in clips:
                    stream_id = next(stream)
                    engine.open_stream(stream_id, StreamOptions())
                    items.append(ChunkItem(stream_id, 0, audio, True))
                engine.feed(items)

            lines.append(row(name, batch, 5.0, f"{timed(step, repeats) / batch:.0f}"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.sensevoice_cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size", choices=["tiny", "large"], default="large")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-onnx", action="store_true")
    args = parser.parse_args(argv)
    model_dir = ensure_synthetic(Path(PoolSettings().model_cache_dir), "sensevoice", args.size)
    model = load_automodel(str(model_dir), "cpu", args.threads)
    lines = [f"SenseVoiceSmall ({args.size}, random weights), {args.threads} threads", ""]
    lines += torch_rows(model, args.repeats)
    if not args.no_onnx:
        lines += ["", *onnx_rows(model, args.repeats, args.threads)]
        lines += ["", *engine_rows(model_dir, args.repeats, args.threads)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
