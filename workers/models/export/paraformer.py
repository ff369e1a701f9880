"""Export a FunASR streaming Paraformer directory to ONNX, for the ``paraformer-onnx`` and
``paraformer-openvino`` engines.

    python -m workers.models.export MODEL_DIR [--int8 [--qdq]]

(The same command takes an offline model's directory to ``workers.models.export.offline``.)

Writes ``MODEL_DIR/onnx-gateway/``: ``encoder.onnx``, ``decoder.onnx`` (with ``--int8``
their int8 ``*_int8.onnx``, with ``--int8 --qdq`` the QDQ int8 ``*_int8_qdq.onnx`` that
OpenVINO reads), and ``manifest.json``, which records what they
were exported from; a later call (every gateway start with the ONNX engine makes one) finds
them up to date and returns at once. Offline: the model directory is all it reads.

Differences from funasr's own export (``AutoModel.export``):

- torch's classic exporter (``dynamo=False``, opset 14): the default one fails on the
  streaming decoder under torch 2.13.
- The decoder returns each FSMN layer's whole input, the incoming cache and the new frames
  (``[B, D, K-1 + N]``), instead of its last ``K-1`` frames. In a batch, streams that emit
  fewer than ``N`` tokens are padded, and the stock export's last ``K-1`` frames would
  contain that padding; the engine keeps, per stream, the ``K-1`` frames that end at the
  stream's own length, so batched output equals single-stream output.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shared.engines import Precision
from workers.engines.runtime.onnx_files import (
    FORMAT_VERSION,
    INV_TIMESCALES,
    MANIFEST,
    OnnxFiles,
    source_fingerprint,
    up_to_date,
)

# Re-exported: workers.models.export.punctuation takes the opset and the atomic write from here.
from workers.models.export.common import OPSET as OPSET
from workers.models.export.common import _write_atomically as _write_atomically
from workers.models.export.common import load_for_export, quantize_matmuls


def export(
    model_dir: Path,
    int8: bool = False,
    threads: int = 2,
    qdq: bool = False,
    written: Callable[[Path], None] | None = None,
) -> OnnxFiles:
    """Export (or find up to date) the fp32 graphs, and the int8 ones when asked: ORT's
    QOperator int8, or with ``qdq`` the QDQ int8 that OpenVINO reads. ``written`` is told
    each graph of the asked precision as soon as it is in place, while the export goes on
    (``workers.models.ready`` starts its mapped copy then)."""
    precision: Precision = "int8" if int8 else "fp32"
    if up_to_date(model_dir, precision, qdq):
        return OnnxFiles.of(model_dir, precision, qdq)
    fp32 = OnnxFiles.of(model_dir, "fp32")
    fp32.directory.mkdir(exist_ok=True)
    if not up_to_date(model_dir, "fp32"):
        (fp32.directory / MANIFEST).unlink(missing_ok=True)
        for stale in (OnnxFiles.of(model_dir, "int8", form) for form in (False, True)):
            stale.encoder.unlink(missing_ok=True)  # made from the graphs about to be replaced
            stale.decoder.unlink(missing_ok=True)
        _export_fp32(model_dir, fp32, threads, None if int8 else written)
    if int8:
        _quantize(model_dir, fp32, OnnxFiles.of(model_dir, "int8", qdq), qdq, written)
    manifest = {
        "format": FORMAT_VERSION,
        "source": source_fingerprint(model_dir),
        "int8": OnnxFiles.of(model_dir, "int8").encoder.is_file(),
        "int8_qdq": OnnxFiles.of(model_dir, "int8", qdq=True).encoder.is_file(),
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_atomically(fp32.directory / MANIFEST, json.dumps(manifest, indent=1).encode())
    return OnnxFiles.of(model_dir, precision, qdq)


def _export_fp32(
    model_dir: Path, files: OnnxFiles, threads: int, written: Callable[[Path], None] | None
) -> None:
    import torch

    model, kwargs = load_for_export(model_dir, threads)
    frontend_conf = kwargs["frontend_conf"]
    _save_inv_timescales(
        int(frontend_conf["n_mels"]) * int(frontend_conf["lfr_m"]), files.directory
    )
    encoder_model, decoder_model = model.export(type="onnx", **kwargs)
    _return_whole_fsmn_input(decoder_model.decoder)
    with torch.no_grad():
        for module, path, extra_axes in (
            (encoder_model, files.encoder, {}),
            (decoder_model, files.decoder, _whole_cache_axes(decoder_model)),
        ):
            module.eval()
            axes = {**module.export_dynamic_axes(), **extra_axes}
            with (
                tempfile.TemporaryDirectory(dir=files.directory) as scratch,
                warnings.catch_warnings(),
            ):
                # The classic exporter on purpose (see the module's docstring): its
                # deprecation notice is known.
                warnings.filterwarnings("ignore", "You are using the legacy TorchScript")
                partial = Path(scratch) / path.name
                torch.onnx.export(
                    module,
                    module.export_dummy_inputs(),
                    str(partial),
                    dynamo=False,
                    do_constant_folding=True,
                    opset_version=OPSET,
                    input_names=module.export_input_names(),
                    output_names=module.export_output_names(),
                    dynamic_axes=axes,
                )
                os.replace(partial, path)
            if written is not None:
                written(path)


def _save_inv_timescales(depth: int, directory: Path) -> None:
    """The positional encoding's frequencies, computed as funasr's
    ``StreamSinusoidalPositionEncoder.encode`` does in torch (float32), for the engine's
    torch-free host side (``onnx_frontend.position_encoding``)."""
    import numpy as np
    import torch

    increment = torch.log(torch.tensor([10000], dtype=torch.float32)) / (depth / 2 - 1)
    inv = torch.exp(torch.arange(depth / 2).type(torch.float32) * (-increment))
    np.save(directory / INV_TIMESCALES, inv.numpy().astype(np.float32))


class _WholeInputFsmn:
    """Replaces the decoder FSMN's export module; ``make`` builds the torch module."""

    @staticmethod
    def make(stock: Any) -> Any:
        import torch

        class WholeInputFsmn(torch.nn.Module):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.fsmn_block = stock.fsmn_block
                self.kernel_size = stock.kernel_size

            def forward(
                self, inputs: torch.Tensor, mask: torch.Tensor, cache: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
                # As funasr's preprocess_for_attn with a cache, but the whole [cache, x] out.
                x = (inputs * mask).transpose(1, 2)
                x = torch.cat((cache, x), dim=2)
                whole = x
                x = self.fsmn_block(x).transpose(1, 2)
                x = (x + inputs) * mask
                return x, whole

        return WholeInputFsmn()


def _return_whole_fsmn_input(decoder: Any) -> None:
    layers = list(decoder.model.decoders)
    if decoder.model.decoders2 is not None:
        layers += list(decoder.model.decoders2)
    for layer in layers:
        if layer.self_attn is not None:
            layer.self_attn = _WholeInputFsmn.make(layer.self_attn)


def _whole_cache_axes(decoder_model: Any) -> dict[str, dict[int, str]]:
    names = [n for n in decoder_model.export_output_names() if n.startswith("out_cache_")]
    return {name: {0: "batch_size", 2: "cache_length"} for name in names}


def _quantize(
    model_dir: Path,
    fp32: OnnxFiles,
    int8: OnnxFiles,
    qdq: bool,
    written: Callable[[Path], None] | None,
) -> None:
    """Static int8 quantization of the MatMuls (QOperator, per-channel weights; with ``qdq``
    the QDQ form, s8 x s8, as OpenVINO's int8 kernels take it), with
    activation ranges calibrated on the model's own inputs: what the fp32 engine feeds its
    encoder and decoder while decoding speech-like audio. Fixed scales make a stream's
    output independent of its batch-mates (dynamic quantization picks them per call), and
    the integer kernels run faster (VNNI). funasr's exclusions: the output layer, biases."""
    encoder_feeds, decoder_feeds = _calibration_feeds(model_dir)
    for source, target, feeds in (
        (fp32.encoder, int8.encoder, encoder_feeds),
        (fp32.decoder, int8.decoder, decoder_feeds),
    ):
        quantize_matmuls(source, target, feeds, qdq=qdq, signed_activations=qdq)
        if written is not None:
            written(target)


def _calibration_feeds(model_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Decode speech-like audio with the fp32 engine, several streams batched, recording
    every encoder and decoder input. (Random weights make any audio as good as any other;
    for a trained model, speech would calibrate better: a known limit.)"""
    import numpy as np

    from shared.messages import StreamOptions
    from workers.engines.base import ChunkItem
    from workers.engines.paraformer.streaming_onnx import ParaformerOnnxEngine

    engine = ParaformerOnnxEngine(model_dir, "fp32", "cpu", 2)
    recorded: dict[str, list[dict[str, Any]]] = {"encoder": [], "decoder": []}

    class Recording:
        def __init__(self, session: Any, into: list[dict[str, Any]]) -> None:
            self._session, self._into = session, into

        def run(self, names: Any, feeds: dict[str, Any]) -> Any:
            self._into.append({k: np.array(v, copy=True) for k, v in feeds.items()})
            return self._session.run(names, feeds)

    engine._encoder = Recording(engine._encoder, recorded["encoder"])
    engine._decoder = Recording(engine._decoder, recorded["decoder"])
    options = StreamOptions(encoder_chunk_look_back=0, decoder_chunk_look_back=0)
    chunk = 9600
    for group in range(3):
        audios = []
        for s in range(6):
            rng = np.random.default_rng(1000 + 10 * group + s)
            n = chunk * (4 + s % 3)
            t = np.arange(n) / 16000
            tone = 4000 * np.sin(2 * np.pi * (120 + 70 * s) * t) * np.sin(2 * np.pi * 2 * t)
            audios.append((tone + 1500 * rng.standard_normal(n)).astype(np.int16))
            engine.open_stream(100 * group + s, options)
        for k in range(max(len(a) for a in audios) // chunk):
            items = [
                ChunkItem(
                    100 * group + s, k, a[k * chunk : (k + 1) * chunk], (k + 1) * chunk >= len(a)
                )
                for s, a in enumerate(audios)
                if k * chunk < len(a)
            ]
            engine.feed(items)
    return recorded["encoder"], recorded["decoder"]
