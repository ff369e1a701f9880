"""SenseVoiceSmall's ONNX graph, for the ``sensevoice-onnx`` engine: funasr's own export.

``workers.models.export_offline`` writes it into the offline exports' place
(``onnx-gateway/model.onnx``, the same manifest). The graph is funasr's
``SenseVoiceSmall.export`` (``export_meta.export_forward``): per row, the language and
text-norm prompt ids, the features, and the CTC head's logits with the encoder's output
lengths (the four prompt frames included), traced with torch's classic exporter as the
Paraformer exports are. Its greedy tokens equal PyTorch's on every frame (BENCHMARKS.md,
"SenseVoiceSmall"). fp32 only: ``SENSEVOICE_FP32_ONLY`` says why.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

from workers.models.export_common import OPSET, load_for_export

SENSEVOICE_FP32_ONLY = (
    "SenseVoiceSmall's graph is exported in fp32 only: onnxruntime's static quantization"
    " (the Paraformers' int8 recipe) fails on its SAN-M attention's MatMul outputs; serve"
    " it in fp32 (ASR_ONNX_PRECISION, or its models-file entry's onnx_precision)"
)


def export_sensevoice_fp32(model_dir: Path, path: Path, threads: int) -> None:
    import torch

    model, _ = load_for_export(model_dir, threads)
    rebuilt = model.export(type="onnx", max_seq_len=512)  # funasr's export_meta, in place
    with (
        torch.no_grad(),
        tempfile.TemporaryDirectory(dir=path.parent) as scratch,
        warnings.catch_warnings(),
    ):
        warnings.filterwarnings("ignore", "You are using the legacy TorchScript")
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        partial = Path(scratch) / path.name
        torch.onnx.export(
            rebuilt,
            rebuilt.export_dummy_inputs(),
            str(partial),
            dynamo=False,
            do_constant_folding=True,
            opset_version=OPSET,
            input_names=rebuilt.export_input_names(),
            output_names=rebuilt.export_output_names(),
            dynamic_axes=rebuilt.export_dynamic_axes(),
        )
        os.replace(partial, path)
