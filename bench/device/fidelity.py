"""Step 3 of ``bench/device/check.sh``: the model, and the engine's text on the device
against the CPU's. ``model`` (3a) builds the synthetic streaming Paraformer there and its
ONNX fp32 export; ``fidelity`` compares chunk for chunk, in fp32 (3b) and int8 (3c).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from bench.device.placement import STAND_IN
from bench.device.records import KEYS, PYTHON, Row, Status, StepRecord


def model_step(args: argparse.Namespace) -> StepRecord:
    """Build the synthetic streaming Paraformer (here: the large one is 0.9 GB, never
    carried) and, for the ONNX engine, its fp32 export."""
    started = time.monotonic()
    from workers.models.resolve import ensure_synthetic

    path = ensure_synthetic(args.models, "streaming", args.size)
    built = time.monotonic() - started
    (args.work / "model_dir").write_text(str(path))
    command = f"{PYTHON} -m workers.models.synthetic {path} --kind streaming --size {args.size}"
    result = f"built in {built:.0f} s"
    exported = None
    status: Status = "ok"
    note = fallback = ""
    if args.export:
        from workers.models.export.paraformer import export

        began = time.monotonic()
        command += f" && {PYTHON} -m workers.models.export {path}"
        try:
            export(path, int8=False, threads=args.threads)
            exported = time.monotonic() - began
            result += f", exported to ONNX fp32 in {exported:.0f} s"
        except Exception as exc:
            # The GPU is still worth measuring: the later steps take the PyTorch engine.
            (args.work / "engine").write_text("paraformer")
            status = "failed"
            fallback = f"the ONNX export failed: {type(exc).__name__}: {exc}"[:400]
            note = f"{fallback}; the later steps run the PyTorch engine"
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**30
    data = {
        "model_dir": str(path),
        "model": f"synthetic streaming {args.size} (random weights)",
        "build_s": round(built, 1),
        "export_s": None if exported is None else round(exported, 1),
        "gib_on_disk": round(size, 2),
        "fallback": fallback,
    }
    return StepRecord(
        KEYS["model"],
        status,
        time.monotonic() - started,
        [Row("synthetic model", command, f"{result}; {size:.2f} GiB on disk")],
        data,
        note,
    )


def compare(ours: list[list[str]], reference: list[list[str]]) -> tuple[int, int, int]:
    """Streams whose every chunk's text is equal; chunks equal; chunks in all."""
    streams = chunks = total = 0
    for mine, theirs in zip(ours, reference, strict=True):
        equal = [a == b for a, b in zip(mine, theirs, strict=False)]
        same_count = len(mine) == len(theirs)
        streams += same_count and all(equal)
        chunks += sum(equal)
        total += len(theirs)
    return streams, chunks, total


def fidelity_step(args: argparse.Namespace) -> StepRecord:
    """The engine's text on ``--device`` against the CPU's, chunk for chunk, on N streams of
    different lengths (``bench.models.onnx_fidelity``'s audio): the ONNX engine batched as the
    worker runs it; the PyTorch engine (the fallback) one stream at a time, as it runs."""
    started = time.monotonic()
    from bench.common.audio import chunks_of_tone
    from bench.models.onnx_fidelity import alone, batched

    key = KEYS[f"fidelity-{args.precision}"]
    model_dir = Path(args.model)
    audios = [chunks_of_tone(100 + s) for s in range(args.streams)]
    cpu_engine: Any
    device_engine: Any
    data: dict[str, Any] = {"engine": args.engine, "precision": args.precision}
    command = (
        f"{PYTHON} -m bench.device.check fidelity --model {model_dir} --device {args.device}"
        f" --engine {args.engine} --precision {args.precision} --streams {args.streams}"
    )
    if args.engine == "paraformer-onnx":
        from workers.engines.paraformer.streaming_onnx import ParaformerOnnxEngine

        if args.precision == "int8":
            from workers.models.export.paraformer import export

            began = time.monotonic()
            export(model_dir, int8=True)
            data["int8_export_s"] = round(time.monotonic() - began, 1)
        cpu_engine = ParaformerOnnxEngine(model_dir, args.precision, "cpu", args.threads)
        try:
            device_engine = ParaformerOnnxEngine(
                model_dir, args.precision, args.device, args.threads
            )
        except Exception as exc:
            note = f"{args.precision} on {args.device}: {type(exc).__name__}: {exc}"
            return StepRecord(
                key,
                "failed",
                time.monotonic() - started,
                [Row("fidelity", command, "")],
                data,
                note,
            )
        # Which providers the sessions hold, in order: what ran (a node the first cannot run
        # falls to the next). The engine keeps its sessions private; a bench may look.
        data["providers_used"] = device_engine._encoder.get_providers()
        data["provider"] = data["providers_used"][0]
        if args.device.startswith("cuda") and data["provider"] == "CPUExecutionProvider":
            note = f"asked for {args.device}, onnxruntime ran on the CPU (its CUDA libraries?)"
            row = Row("fidelity", command, "")
            return StepRecord(key, "failed", time.monotonic() - started, [row], data, note)

        def decode(engine: Any) -> list[list[str]]:
            return batched(engine, audios)
    else:
        from dataclasses import replace

        from shared.messages import EngineSpec
        from workers.engines.paraformer.streaming import ParaformerStreamingEngine

        spec = EngineSpec("paraformer", "cpu", str(model_dir), threads=args.threads)
        cpu_engine = ParaformerStreamingEngine.load(spec)
        device_engine = ParaformerStreamingEngine.load(replace(spec, device=args.device))
        data["provider"] = f"torch {args.device}"

        def decode(engine: Any) -> list[list[str]]:
            return [alone(engine, audio, s) for s, audio in enumerate(audios)]

    timings = {}
    began = time.monotonic()
    reference = decode(cpu_engine)
    timings["cpu_s"] = time.monotonic() - began
    began = time.monotonic()
    first = decode(device_engine)  # also the warm-up: each new shape's first run is slow
    timings["device_first_s"] = time.monotonic() - began
    began = time.monotonic()
    again = decode(device_engine)
    timings["device_s"] = time.monotonic() - began
    streams, chunks, total = compare(again, reference)
    repeat_streams, _, _ = compare(again, first)
    tokens = sum(len("".join(t)) for t in reference)
    data.update(
        streams=args.streams,
        chunks=total,
        chunks_equal=chunks,
        streams_equal=streams,
        repeat_equal=repeat_streams == args.streams,
        tokens=tokens,
        **{k: round(v, 3) for k, v in timings.items()},
        differing=[
            {"stream": s, "chunk": k, "cpu": b, "device": a}
            for s, (mine, theirs) in enumerate(zip(again, reference, strict=True))
            for k, (a, b) in enumerate(zip(mine, theirs, strict=False))
            if a != b
        ][:8],
    )
    result = (
        f"{streams}/{args.streams} streams and {chunks}/{total} chunks equal to the CPU's"
        f" ({tokens} characters); {args.device} again: "
        f"{'same text' if data['repeat_equal'] else 'text differs from its first run'};"
        f" {timings['device_s'] / total * 1e3:.1f} ms per chunk on {args.device},"
        f" {timings['cpu_s'] / total * 1e3:.1f} on the CPU (threads: {args.threads});"
        f" ran on {data['provider']}"
    )
    if args.dry_run:
        result += f"; {STAND_IN}"
    label = f"fidelity {args.engine} {args.precision}, {args.device} vs CPU"
    return StepRecord(
        key, "ok", time.monotonic() - started, [Row(label, command, result, args.streams)], data
    )
