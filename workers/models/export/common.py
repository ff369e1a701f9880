"""What the ONNX exports share (``workers.models.export.paraformer`` for the streaming Paraformer,
``workers.models.export.offline`` for the offline one): the opset, the trace of a graph to
a file, the atomic write of a small file, and the int8 recipe."""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

OPSET = 14


def trace_to_onnx(
    graph: Any,
    dummy_inputs: Any,
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, Any],
) -> None:
    """``path``: ``graph`` traced by torch's classic exporter at ``OPSET``, whole or not at
    all (written beside it, then moved into place)."""
    import torch

    with (
        torch.no_grad(),
        tempfile.TemporaryDirectory(dir=path.parent) as scratch,
        warnings.catch_warnings(),
    ):
        # The classic exporter on purpose (as the streaming export): its notice is known,
        # and so is the tracer's on funasr's positional encodings, whose torch.tensor(10000)
        # is a constant indeed. (torch ignores the tracer's only from its first import on.)
        warnings.filterwarnings("ignore", "You are using the legacy TorchScript")
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        partial = Path(scratch) / path.name
        torch.onnx.export(
            graph,
            dummy_inputs,
            str(partial),
            dynamo=False,
            do_constant_folding=True,
            opset_version=OPSET,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
        )
        os.replace(partial, path)


def quantize_matmuls(
    source: Path,
    target: Path,
    feeds: list[dict[str, Any]],
    *,
    qdq: bool = False,
    per_channel: bool = True,
    signed_activations: bool = False,
) -> None:
    """``target``: ``source`` with its MatMuls statically quantized (QOperator, per-channel
    weights, MinMax activation ranges calibrated on ``feeds``, the graph's own inputs); as
    funasr, the output layer and the biases are not. Fixed scales make a row's output
    independent of its batch-mates (dynamic quantization picks them per call), and the
    integer kernels run faster (VNNI). ``qdq``, ``per_channel`` and ``signed_activations``
    (s8 x s8 rather than u8 x s8) make the variants BENCHMARKS.md's int8 roofline compares.

    Weights take 7 bits (``reduce_range``): on an x86 CPU without VNNI (AVX2 only: AMD
    EPYC before Zen 4, Intel before Cascade Lake) ONNX Runtime's and OpenVINO's u8 x s8
    kernels add pairs of products in 16 bits, which saturate with 8-bit weights. Measured
    on an AVX2-only EPYC (tests/workers/engines/test_paraformer_onnx.py, 4 clips): int8
    text 0.37 similar to fp32's with 8 bits, 0.94 (ONNX Runtime) and 0.91 (OpenVINO)
    with 7. An export is made once and may be served on any CPU, so it is made safe for
    all."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    nodes = [node.name for node in onnx.load(str(source)).graph.node]
    excluded = [n for n in nodes if "output" in n or "bias_encoder" in n or "bias_decoder" in n]
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        partial = Path(scratch) / target.name
        quantize_static(
            model_input=str(source),
            model_output=str(partial),
            calibration_data_reader=_FeedReader(feeds),
            quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
            op_types_to_quantize=["MatMul"],
            per_channel=per_channel,
            activation_type=QuantType.QInt8 if signed_activations else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_exclude=excluded,
            reduce_range=True,
        )
        os.replace(partial, target)


class _FeedReader:
    """onnxruntime's CalibrationDataReader over recorded feeds."""

    def __init__(self, feeds: list[dict[str, Any]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._feeds, None)


def load_for_export(model_dir: Path, threads: int) -> tuple[Any, dict[str, Any]]:
    """funasr's model of ``model_dir`` in eval mode, and its build options without the
    model: copies, so that an export's in-place rebuild never touches funasr's own."""
    import copy

    from workers.engines.paraformer.streaming import load_automodel

    automodel = load_automodel(str(model_dir), "cpu", threads)
    kwargs: dict[str, Any] = copy.deepcopy(automodel.kwargs)
    kwargs.pop("model", None)
    return copy.deepcopy(automodel.model).eval(), kwargs


def _write_atomically(path: Path, data: bytes) -> None:
    """``path`` holds ``data`` whole, or is as it was; a write that fails (a full disk)
    leaves no temporary file behind either."""
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
        temporary = Path(handle.name)
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
