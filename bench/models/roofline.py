"""The int8 encoder's roofline on these cores, and its runtimes side by side.

    python -m bench.models.roofline --model synthetic:large --batch 8 --frames 20

One thread throughout, the large streaming Paraformer's exported encoder (``python -m
workers.models.export DIR --int8``), one input (``--batch`` rows of ``--frames`` LFR frames).
Times are CPU seconds of this process per call (``time.process_time``), so that other work
on the machine slows the clock less than it slows the wall; the median of ``--runs``.

1. **The kernel's peak**: one ``MatMulInteger`` node (ONNX Runtime's int8 GEMM, the one our
   ``QLinearMatMul`` runs), u8 x s8 and u8 x u8, at the encoder's shapes (M = batch x
   frames; K, N of 512, 1536 and 2048), in G multiply-accumulates a second.
2. **Where the int8 encoder's time goes**: ONNX Runtime's profiler, time per operator type,
   and the MACs of its ``QLinearMatMul`` and ``MatMul`` nodes counted from the shapes the
   profiler records: the rate the GEMMs reach inside the graph, against the kernel alone.
3. **Runtimes side by side on the same exported model**: ONNX Runtime fp32 at each graph
   optimisation level; int8 as we export it (QOperator, per-channel, u8 x s8), per-tensor,
   s8 x s8, and QDQ; OpenVINO on the fp32 graph (fp32 and the bf16 inference hint) and on the
   QDQ graph (OpenVINO reads QDQ as its own int8). ms per row, and the largest difference
   of the encoder's output from ONNX Runtime fp32's.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.common.report import header, row
from workers.engines.runtime.onnx_files import OnnxFiles
from workers.models.resolve import resolve_model

Run = Callable[[], Any]
GEMM_SHAPES = ((512, 512), (512, 1536), (512, 2048), (2048, 512))


def cpu_ms(call: Run, runs: int) -> float:
    """The median CPU ms of ``call`` over ``runs``, after one warm-up call."""
    call()
    times = []
    for _ in range(runs):
        started = time.process_time()
        call()
        times.append((time.process_time() - started) * 1000)
    return statistics.median(times)


def session(path: str | Path, level: Any = None, profile: str | None = None) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    if level is not None:
        options.graph_optimization_level = level
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def gemm_peak(m: int, runs: int) -> list[str]:
    """One ``MatMulInteger`` node at the encoder's shapes: G MAC/s."""
    import onnx
    from onnx import TensorProto, helper

    lines = header("GEMM (M x K x N)", "u8 x s8, G MAC/s", "u8 x u8, G MAC/s")
    with tempfile.TemporaryDirectory() as scratch:
        for k, n in GEMM_SHAPES:
            rates = []
            for weight_type, numpy_type in (
                (TensorProto.INT8, np.int8),
                (TensorProto.UINT8, np.uint8),
            ):
                rng = np.random.default_rng(0)
                weights = rng.integers(-100, 100, (k, n)).astype(numpy_type)
                graph = helper.make_graph(
                    [helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
                    "gemm",
                    [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
                    [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
                    [onnx.numpy_helper.from_array(weights, "w")],
                )
                model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                path = Path(scratch) / f"gemm_{k}_{n}_{weight_type}.onnx"
                onnx.save(model, str(path))
                gemm = session(path)
                a = rng.integers(0, 255, (m, k)).astype(np.uint8)
                ms = cpu_ms(_runner_of(gemm, {"a": a}, None), runs * 5)
                rates.append(m * k * n / (ms / 1000) / 1e9)
            lines.append(row(f"{m} x {k} x {n}", f"{rates[0]:.0f}", f"{rates[1]:.0f}"))
    return lines


def profile(path: Path, feeds: dict[str, Any], runs: int) -> tuple[list[str], float]:
    """Time per operator type of one model, and the rate of its GEMMs (G MAC/s)."""
    with tempfile.TemporaryDirectory() as scratch:
        encoder = session(path, profile=str(Path(scratch) / "profile"))
        for _ in range(runs):
            encoder.run(None, feeds)
        events = json.loads(Path(encoder.end_profiling()).read_text())
    per_op: dict[str, float] = collections.defaultdict(float)
    macs = 0
    for event in events:
        args = event.get("args", {})
        if event.get("cat") != "Node" or "op_name" not in args:
            continue
        if not event.get("name", "").endswith("_kernel_time"):
            continue
        per_op[args["op_name"]] += event["dur"] / 1000 / runs
        if args["op_name"] in ("QLinearMatMul", "MatMul", "MatMulInteger"):
            shapes = [next(iter(shape.values())) for shape in args.get("input_type_shape", [])]
            b_index = 3 if args["op_name"] == "QLinearMatMul" else 1
            a, b = shapes[0], shapes[b_index]
            macs += int(np.prod(a[:-1])) * a[-1] * b[-1]  # batched (attention) or not
    total = sum(per_op.values())
    lines = header("operator", "ms per call", "share")
    for name, ms in sorted(per_op.items(), key=lambda item: -item[1])[:10]:
        lines.append(row(name, f"{ms:.2f}", f"{ms / total:.0%}"))
    gemm_ms = sum(ms for name, ms in per_op.items() if "MatMul" in name)
    lines += [
        "",
        f"all operators: {total:.1f} ms per call; GEMMs (every *MatMul*): {gemm_ms:.1f} ms"
        f" ({gemm_ms / total:.0%}); {macs / runs / 1e9:.2f} G MAC per call",
    ]
    rate = macs / runs / (gemm_ms / 1000) / 1e9 if gemm_ms else 0.0
    lines.append(f"the GEMMs' rate inside the graph: {rate:.0f} G MAC/s")
    return lines, macs / runs / 1e9


def variants(
    model_dir: Path, feeds: dict[str, Any], calibration: list[dict[str, Any]], runs: int
) -> list[str]:
    import onnxruntime as ort

    from workers.models.export.common import quantize_matmuls

    files = OnnxFiles.of(model_dir, "fp32")
    rows = feeds["speech"].shape[0]
    reference = session(files.encoder).run(["enc"], feeds)[0]
    measured: list[tuple[str, Run]] = []
    for name, level in (
        ("disabled", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
        ("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
        ("extended", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
        ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
    ):
        fp32 = session(files.encoder, level)
        measured.append((f"ONNX Runtime fp32, optimisation {name}", _runner(fp32, feeds)))
    ours = OnnxFiles.of(model_dir, "int8").encoder
    measured.append(
        ("ONNX Runtime int8 (ours: QOperator, per-channel, u8 x s8)", _runner(session(ours), feeds))
    )
    scratch = Path(tempfile.mkdtemp())
    quantized: dict[str, Path] = {}
    for name, options in (
        ("QOperator, per-tensor, u8 x s8", {"per_channel": False}),
        ("QOperator, per-channel, s8 x s8", {"signed_activations": True}),
        ("QDQ, per-channel, u8 x s8", {"qdq": True}),
        ("QDQ, per-channel, s8 x s8", {"qdq": True, "signed_activations": True}),
    ):
        target = scratch / f"encoder_{len(quantized)}.onnx"
        quantize_matmuls(files.encoder, target, list(calibration), **options)
        quantized[name] = target
        measured.append((f"ONNX Runtime int8, {name}", _runner(session(target), feeds)))
    measured += _openvino(files.encoder, quantized["QDQ, per-channel, s8 x s8"], feeds)
    lines = header("runtime", "ms per row", "max abs diff from ORT fp32")
    for name, run in measured:
        output = run()
        diff = float(np.max(np.abs(np.asarray(output) - reference)))
        lines.append(row(name, f"{cpu_ms(run, runs) / rows:.1f}", f"{diff:.4f}"))
    shutil.rmtree(scratch, ignore_errors=True)
    return lines


def _runner(encoder: Any, feeds: dict[str, Any]) -> Run:
    return _runner_of(encoder, feeds, ["enc"])


def _runner_of(model: Any, feeds: dict[str, Any], outputs: list[str] | None) -> Run:
    return lambda: model.run(outputs, feeds)[0]


def _openvino(fp32: Path, qdq: Path, feeds: dict[str, Any]) -> list[tuple[str, Run]]:
    try:
        import openvino as ov
    except ImportError:
        return []
    core = ov.Core()
    found: list[tuple[str, Run]] = []
    for name, path, config in (
        ("OpenVINO fp32", fp32, {"INFERENCE_PRECISION_HINT": "f32"}),
        ("OpenVINO, bf16 inference hint", fp32, {"INFERENCE_PRECISION_HINT": "bf16"}),
        ("OpenVINO on the QDQ s8 x s8 graph", qdq, {"INFERENCE_PRECISION_HINT": "f32"}),
    ):
        compiled = core.compile_model(
            str(path), "CPU", {**config, "INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1}
        )
        request = compiled.create_infer_request()
        output = compiled.output("enc")

        def run(request: Any = request, output: Any = output) -> Any:
            return request.infer(feeds)[output]

        found.append((name, run))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "asr-gateway" / "models"))
    args = parser.parse_args(argv)
    import asyncio

    from workers.models.export.paraformer import _calibration_feeds
    from workers.pool.prepare import ensure_onnx_export

    model_dir = resolve_model(args.model, args.cache).model_dir
    assert model_dir is not None
    asyncio.run(ensure_onnx_export(model_dir, "int8"))
    rng = np.random.default_rng(0)
    feeds = {
        "speech": rng.standard_normal((args.batch, args.frames, 560)).astype(np.float32),
        "speech_lengths": np.full(args.batch, args.frames, np.int32),
    }
    m = args.batch * args.frames
    out = [
        f"# the int8 encoder's roofline: batch {args.batch} x {args.frames} frames, 1 thread",
        "",
    ]
    out += ["## 1. ONNX Runtime's int8 GEMM alone", "", *gemm_peak(m, args.runs), ""]
    profile_lines, _ = profile(OnnxFiles.of(Path(model_dir), "int8").encoder, feeds, args.runs)
    out += ["## 2. The int8 encoder's operators", "", *profile_lines, ""]
    calibration = _calibration_feeds(Path(model_dir))[0]
    out += [
        "## 3. Runtimes on the same model",
        "",
        *variants(Path(model_dir), feeds, calibration, args.runs),
    ]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
