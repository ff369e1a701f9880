"""The streaming Paraformer's ONNX export under OpenVINO's CPU runtime.

Everything but the two model calls is ``paraformer-onnx``'s: the same host steps (frontend,
CIF, FSMN state per stream), the same batching, the same exported graphs. OpenVINO reads
the fp32 graphs as they are, and int8 in the QDQ form (``export --int8 --qdq``): it cannot
read ONNX Runtime's ``QLinearMatMul`` graphs, and it runs the QDQ pairs as its own int8
kernels. ``bench.models.roofline`` measures why this engine exists: on the large model's
encoder, OpenVINO on the QDQ graph takes 0.70 of ONNX Runtime's time on its own int8.

OpenVINO is imported in the worker only (``pip install openvino``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shared.engines import EngineName
from workers.engines.paraformer_onnx import ParaformerOnnxEngine


class ParaformerOpenVinoEngine(ParaformerOnnxEngine):
    name = EngineName.PARAFORMER_OPENVINO
    qdq_int8 = True

    def _open_graph(self, graph: Path, device: str, threads: int) -> Any:
        if device != "cpu":
            raise ValueError(
                f"{self.name} runs on the CPU only (device {device!r}); on a GPU, use"
                " paraformer-onnx"
            )
        return OpenVinoGraph(graph, threads)


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
