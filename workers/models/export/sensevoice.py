"""SenseVoiceSmall's ONNX graph, for the ``sensevoice-onnx`` engine: funasr's own export.

``workers.models.export.offline`` writes it into the offline exports' place
(``onnx-gateway/model.onnx``, the same manifest). The graph is funasr's
``SenseVoiceSmall.export`` (``export_meta.export_forward``): per row, the language and
text-norm prompt ids, the features, and the CTC head's logits with the encoder's output
lengths (the four prompt frames included), traced with torch's classic exporter as the
Paraformer exports are. Its greedy tokens equal PyTorch's on every frame (BENCHMARKS.md,
"SenseVoiceSmall"). fp32 only: ``SENSEVOICE_FP32_ONLY`` says why.
"""

from __future__ import annotations

from pathlib import Path

from workers.models.export.common import load_for_export, trace_to_onnx

SENSEVOICE_FP32_ONLY = (
    "SenseVoiceSmall's graph is exported in fp32 only: onnxruntime's static quantization"
    " (the Paraformers' int8 recipe) fails on its SAN-M attention's MatMul outputs; serve"
    " it in fp32 (ASR_ONNX_PRECISION, or its models-file entry's onnx_precision)"
)


def export_sensevoice_fp32(model_dir: Path, path: Path, threads: int) -> None:
    model, _ = load_for_export(model_dir, threads)
    rebuilt = model.export(type="onnx", max_seq_len=512)  # funasr's export_meta, in place
    trace_to_onnx(
        rebuilt,
        rebuilt.export_dummy_inputs(),
        path,
        rebuilt.export_input_names(),
        rebuilt.export_output_names(),
        rebuilt.export_dynamic_axes(),
    )
