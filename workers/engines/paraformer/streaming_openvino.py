"""The streaming Paraformer's ONNX export under OpenVINO's CPU runtime.

Everything but the two model calls is ``paraformer-onnx``'s: the same host steps (frontend,
CIF, FSMN state per stream), the same batching, the same exported graphs. OpenVINO reads
the fp32 graphs as they are, and int8 in the QDQ form (``export --int8 --qdq``): it cannot
read ONNX Runtime's ``QLinearMatMul`` graphs, and it runs the QDQ pairs as its own int8
kernels. On the large model at a fixed batch of 8 it decodes 1.32x the audio ONNX
Runtime's int8 does (``bench.models.raw_ceiling``); at the gateway's batches, which change
size every step, it is no faster, and a worker holds 3.5x the memory (BENCHMARKS.md,
"OpenVINO"). So it is a choice, not the default.

OpenVINO is imported in the worker only (``pip install openvino``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from workers.engines.paraformer.streaming_onnx import ParaformerOnnxEngine

# 1, 2, 3, 4, then powers of two and the halfway points between them: at most 1/3 padding.
_SIZES = (1, 2, 3, *sorted({2**k for k in range(2, 11)} | {3 * 2**k for k in range(1, 10)}))


class ParaformerOpenVinoEngine(ParaformerOnnxEngine):
    name = "paraformer-openvino"
    qdq_int8 = True

    def _open_graph(self, graph: Path, device: str, threads: int) -> Any:
        if device != "cpu":
            raise ValueError(
                f"{self.name} runs on the CPU only (device {device!r}); on a GPU, use"
                " paraformer-onnx"
            )
        return OpenVinoGraph(graph, threads)

    def _padded(self, rows: int) -> int:
        """OpenVINO compiles (and keeps) its kernels for each new input shape: with every
        batch size and token count as they come, a worker grew to 2.1 GB (1.4 GB so), and
        a step with a new shape took 100-250 ms more. A few sizes instead: rows and tokens
        up to the next of 1, 2, 3, 4, 6, 8, 12, 16, 24, 32..."""
        return next(size for size in _SIZES if size >= rows) if rows <= _SIZES[-1] else rows


class OpenVinoGraph:
    """A compiled OpenVINO model behind onnxruntime's ``run(None, feeds)``: every output,
    in the graph's order, as arrays of its own."""

    def __init__(self, graph: Path, threads: int) -> None:
        try:
            import openvino as ov
        except ImportError as exc:
            raise RuntimeError(
                "the paraformer-openvino engine needs OpenVINO: pip install openvino"
            ) from exc
        compiled = ov.Core().compile_model(
            str(graph),
            "CPU",
            {
                # fp32 arithmetic outside the int8 kernels: on cores with BF16, OpenVINO
                # would otherwise pick bf16, which changes the text.
                "INFERENCE_PRECISION_HINT": "f32",
                "INFERENCE_NUM_THREADS": threads,
                "NUM_STREAMS": 1,
                # Several workers share the cores; pinned, two could land on the same one.
                "ENABLE_CPU_PINNING": False,
            },
        )
        self._request = compiled.create_infer_request()
        self._outputs = list(compiled.outputs)

    def run(self, names: None, feeds: dict[str, Any]) -> list[Any]:
        results = self._request.infer(feeds)  # copies out of the request's buffers
        return [np.asarray(results[output]) for output in self._outputs]
