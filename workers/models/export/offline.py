"""Export a FunASR offline Paraformer directory to ONNX, for ``paraformer-offline-onnx``.

    python -m workers.models.export MODEL_DIR [--int8]

(``python -m workers.models.export`` hands an offline directory to this module.) Writes
``MODEL_DIR/onnx-gateway/`` (``workers.engines.runtime.onnx_files.OfflineOnnxFiles``):
``model.onnx`` (and with ``--int8`` ``model_int8.onnx``) and ``manifest.json`` (``kind:
offline``), which records what they were exported from; a later call (every start of a
pool with the ONNX engine makes one) finds them up to date and returns at once. Offline:
the model directory is all it reads.

The graph is funasr's own offline export (``Paraformer.export``, ``export_meta``: what
FunASR's C++ runtime runs): features ``speech [B, T, 560]`` and ``speech_lengths [B]`` in,
``logits [B, N, vocab]`` (log-softmax) and ``token_num [B]`` out; encoder, CIF predictor and
decoder in one graph. Differences:

- The encoder's output is zeroed at each row's padded frames before the predictor. funasr's
  predictor convolves over the frame after a row's last one and integrates its tail from
  it: in a padded batch that frame is another row's length of encoder output, not the
  zeros a row alone sees, so funasr's batched text of a short utterance may differ from its
  text alone. Zeroed, a row's text is the same in any batch, and equals funasr's
  ``generate`` on the utterance alone.
- One zero frame is appended to the predictor's acoustic embeddings, masked: with no token
  in any row (clips of ~0.1 s) the decoder would get none and fail. ``logits`` has
  ``max(token_num) + 1`` rows; a row's text is read from its first ``token_num``.
- torch's classic exporter at the streaming export's opset (``workers.models.export.paraformer``).
- int8: the streaming export's static quantization (``quantize_matmuls``: QOperator MatMuls,
  per-channel weights, MinMax activation ranges), calibrated on what the fp32 engine feeds
  the graph while decoding speech-like audio of 1 to 6 s, one utterance per call (no
  padding in the ranges). Fixed scales keep a row's text independent of its batch-mates.

Of the Paraformers, only class ``Paraformer``: SeACo-Paraformer (hotwords) and
BiCifParaformer (timestamps) are refused, and ``select_engine`` keeps them on the PyTorch
engine. A SenseVoiceSmall directory gets funasr's own SenseVoice graph in the same place
(``workers.models.export.sensevoice``), for ``sensevoice-onnx``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from shared.engines import Precision, Role
from workers.engines.kinds import kind_of_class
from workers.engines.paraformer.offline_onnx import EXPORTED_MODEL_CLASSES, serves
from workers.engines.runtime.model_dir import model_class
from workers.engines.runtime.onnx_files import (
    MANIFEST,
    OFFLINE_FORMAT_VERSION,
    OFFLINE_KIND,
    OfflineOnnxFiles,
    source_fingerprint,
    up_to_date,
)
from workers.models.export.common import (
    _write_atomically,
    load_for_export,
    quantize_matmuls,
    trace_to_onnx,
)
from workers.models.export.sensevoice import SENSEVOICE_FP32_ONLY, export_sensevoice_fp32

CALIBRATION_SECONDS = (1.0, 1.6, 2.3, 3.0, 3.0, 3.4, 4.1, 4.8, 5.5, 6.0)


def is_offline_model_dir(model_dir: Path) -> bool:
    """Whether the directory holds an offline Paraformer of any class (exportable or not)."""
    kind = kind_of_class(model_class(model_dir))
    return kind is not None and kind.role is Role.OFFLINE


def export_offline(model_dir: Path, int8: bool = False, threads: int = 2) -> OfflineOnnxFiles:
    """Export (or find up to date) the fp32 graph, and the int8 one when asked."""
    precision: Precision = "int8" if int8 else "fp32"
    if up_to_date(model_dir, precision):
        return OfflineOnnxFiles.of(model_dir, precision)
    sensevoice = model_class(model_dir) == "SenseVoiceSmall"
    if sensevoice and int8:
        raise ValueError(f"{model_dir}: {SENSEVOICE_FP32_ONLY}")
    if not (serves(model_dir) or sensevoice):
        raise ValueError(
            f"{model_dir}: model class {model_class(model_dir)!r} has no ONNX export here"
            f" (only {', '.join(EXPORTED_MODEL_CLASSES)}); it runs on paraformer-offline"
        )
    fp32 = OfflineOnnxFiles.of(model_dir, "fp32")
    fp32.directory.mkdir(exist_ok=True)
    if not up_to_date(model_dir, "fp32"):
        (fp32.directory / MANIFEST).unlink(missing_ok=True)
        OfflineOnnxFiles.of(model_dir, "int8").model.unlink(missing_ok=True)  # made from the old
        if sensevoice:
            export_sensevoice_fp32(model_dir, fp32.model, threads)
        else:
            _export_fp32(model_dir, fp32.model, threads)
    int8_files = OfflineOnnxFiles.of(model_dir, "int8")
    if int8:
        quantize_matmuls(fp32.model, int8_files.model, _calibration_feeds(model_dir, threads))
    manifest = {
        "format": OFFLINE_FORMAT_VERSION,
        "kind": OFFLINE_KIND,
        "source": source_fingerprint(model_dir),
        "int8": int8_files.model.is_file(),
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_atomically(fp32.directory / MANIFEST, json.dumps(manifest, indent=1).encode())
    return OfflineOnnxFiles.of(model_dir, precision)


def _export_fp32(model_dir: Path, path: Path, threads: int) -> None:
    model, kwargs = load_for_export(model_dir, threads)
    rebuilt = model.export(type="onnx", **kwargs)  # funasr's export modules, in place
    trace_to_onnx(
        _masked_graph(rebuilt).eval(),
        rebuilt.export_dummy_inputs(),
        path,
        rebuilt.export_input_names(),
        rebuilt.export_output_names(),
        rebuilt.export_dynamic_axes(),
    )


def _masked_graph(rebuilt: Any) -> Any:
    """funasr's ``export_forward`` with the padded encoder frames zeroed and the extra
    acoustic frame (the module's docstring); the decoder's steps are its export's
    (``ParaformerSANMDecoderExport.forward``), its target mask as long as the frames."""
    import torch

    class MaskedParaformer(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.encoder = rebuilt.encoder
            self.predictor = rebuilt.predictor
            self.decoder = rebuilt.decoder
            self.make_pad_mask = rebuilt.make_pad_mask

        def forward(
            self, speech: torch.Tensor, speech_lengths: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            enc, enc_len = self.encoder(speech=speech, speech_lengths=speech_lengths)
            mask = self.make_pad_mask(enc_len)[:, None, :]
            enc = enc * mask.transpose(1, 2)
            embeds, token_num, _, _ = self.predictor(enc, mask)
            token_num = token_num.floor().type(torch.int32)
            # One zero frame past the longest row's tokens: where no row has a token (a clip
            # of ~0.1 s), the decoder's convolution would get no frames and fail. Past every
            # row's count, it is masked: no row's logits change.
            embeds = torch.cat([embeds, torch.zeros_like(enc[:, :1])], dim=1)
            positions = torch.ones_like(embeds[:, :, 0]).cumsum(dim=1)  # 1 .. frames
            tgt_mask = (positions <= token_num[:, None]).type(torch.float32)[:, :, None]
            decoder = self.decoder
            _, memory_mask = decoder.prepare_mask(decoder.make_pad_mask(enc_len))
            x = embeds
            layers = [decoder.model.decoders, decoder.model.decoders2, decoder.model.decoders3]
            for stack in layers:
                if stack is not None:
                    x, *_ = stack(x, tgt_mask, enc, memory_mask)
            logits = decoder.output_layer(decoder.after_norm(x))
            return torch.log_softmax(logits, dim=-1), token_num

    return MaskedParaformer()


class _Recording:
    """Stands in for the fp32 engine's session, keeping a copy of every feed."""

    def __init__(self, session: Any, into: list[dict[str, Any]]) -> None:
        self._session, self._into = session, into

    def run(self, names: Any, feeds: dict[str, Any]) -> Any:
        import numpy as np

        self._into.append({k: np.array(v, copy=True) for k, v in feeds.items()})
        return self._session.run(names, feeds)


def _calibration_feeds(model_dir: Path, threads: int) -> list[dict[str, Any]]:
    """The fp32 engine decodes speech-like audio (a modulated tone with noise, as the
    streaming calibration), each utterance alone, recording the graph's inputs. (Random
    weights make any audio as good as any other; for a trained model, speech would calibrate
    better: a known limit.)"""
    import numpy as np

    from shared.messages import StreamOptions
    from workers.engines.base import ChunkItem
    from workers.engines.paraformer.offline_onnx import ParaformerOfflineOnnxEngine

    engine = ParaformerOfflineOnnxEngine(model_dir, "fp32", "cpu", threads)
    recorded: list[dict[str, Any]] = []
    engine._session = _Recording(engine._session, recorded)
    for s, seconds in enumerate(CALIBRATION_SECONDS):
        rng = np.random.default_rng(2000 + s)
        t = np.arange(int(seconds * 16000)) / 16000
        tone = 4000 * np.sin(2 * np.pi * (120 + 70 * s) * t) * np.sin(2 * np.pi * 2 * t)
        audio = (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)
        engine.open_stream(s, StreamOptions())
        engine.feed([ChunkItem(s, 0, audio, True)])
    return recorded
