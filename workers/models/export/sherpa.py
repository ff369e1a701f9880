"""Export a FunASR streaming Paraformer directory as sherpa-onnx's online Paraformer reads
it, for the side-by-side benchmark ``bench.peers.sherpa_onnx``; the gateway never loads it.

    python -m workers.models.export.sherpa MODEL_DIR [--int8]

Writes ``MODEL_DIR/onnx-sherpa/``, once (a later call finds it and returns at once, unless
the model's weights, config or CMVN changed since):

- ``model.onnx`` (the encoder) and ``decoder.onnx``: funasr's own streaming export, the
  graphs ``AutoModel.export(type="onnx")`` writes, unchanged: the encoder without the input
  scale and the positional encoding (sherpa adds both on its side), the decoder returning
  each FSMN layer's last ``kernel_size - 1`` frames as its cache. Traced by torch's classic
  exporter at opset 14, funasr's opset (the default exporter fails on the streaming decoder
  under torch 2.13, as ``workers.models.export.paraformer`` says).
- with ``int8``: ``model_quant.onnx`` and ``decoder_quant.onnx``, as funasr's
  ``quantize=True`` makes them: ONNX Runtime's dynamic quantization of the MatMuls,
  per-channel uint8 weights in 8 bits, the output layer and the biases left out. (The
  gateway's own int8 is static, calibrated, 7-bit: ``workers.models.export.common``.)
- ``tokens.txt``: ``SYMBOL ID`` a line, from ``tokens.json``.

The encoder (each precision's) carries the metadata sherpa-onnx reads in
``sherpa-onnx/csrc/online-paraformer-model.cc``, where a missing key ends the process:
``METADATA_KEYS``. Every graph is one self-contained file, no external data: sherpa-onnx
may load a model from a memory buffer.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.engines import Precision
from workers.engines.runtime.onnx_files import source_fingerprint
from workers.engines.runtime.onnx_frontend import load_cmvn
from workers.models.export.common import _write_atomically, load_for_export, trace_to_onnx

SHERPA_DIR_NAME = "onnx-sherpa"
MANIFEST = "manifest.json"
FORMAT_VERSION = 1  # bump when what is exported changes meaning
# What online-paraformer-model.cc reads from the encoder's metadata (SHERPA_ONNX_READ_META_DATA
# and its _VEC_FLOAT form): each is required.
METADATA_KEYS = (
    "vocab_size",
    "lfr_window_size",
    "lfr_window_shift",
    "encoder_output_size",
    "decoder_num_blocks",
    "decoder_kernel_size",
    "neg_mean",
    "inv_stddev",
)


@dataclass(frozen=True, slots=True)
class SherpaFiles:
    """One precision's files: what the server's ``--paraformer-encoder``,
    ``--paraformer-decoder`` and ``--tokens`` name."""

    directory: Path
    encoder: Path
    decoder: Path
    tokens: Path

    @classmethod
    def of(cls, model_dir: Path, precision: Precision) -> SherpaFiles:
        directory = model_dir / SHERPA_DIR_NAME
        suffix = "_quant" if precision == "int8" else ""
        return cls(
            directory,
            directory / f"model{suffix}.onnx",
            directory / f"decoder{suffix}.onnx",
            directory / "tokens.txt",
        )

    def exist(self) -> bool:
        return all(path.is_file() for path in (self.encoder, self.decoder, self.tokens))


def metadata(model_dir: Path) -> dict[str, str]:
    """The encoder's metadata for sherpa-onnx: ``METADATA_KEYS``, from the model directory's
    ``config.yaml``, ``tokens.json`` and ``am.mvn``, plus a description of where it came
    from. ``inv_stddev`` is ``am.mvn``'s own: sherpa scales it by
    ``sqrt(encoder_output_size)`` itself, in place of the encoder's input scale."""
    import yaml

    config = yaml.safe_load((model_dir / "config.yaml").read_text(encoding="utf-8"))
    frontend, decoder = config["frontend_conf"], config["decoder_conf"]
    tokens = json.loads((model_dir / "tokens.json").read_text(encoding="utf-8"))
    neg_mean, inv_stddev = load_cmvn(model_dir / "am.mvn")
    # funasr's ParaformerSANMDecoder: att_layer_num layers with a cross-attention, then
    # num_blocks - att_layer_num without; each has an FSMN cache (its defaults: 6 and 6).
    att_layers = int(decoder.get("att_layer_num", 6))
    cached_layers = att_layers + max(0, int(decoder.get("num_blocks", 6)) - att_layers)
    return {
        "vocab_size": str(len(tokens)),
        "lfr_window_size": str(int(frontend["lfr_m"])),
        "lfr_window_shift": str(int(frontend["lfr_n"])),
        "encoder_output_size": str(int(config["encoder_conf"]["output_size"])),
        "decoder_num_blocks": str(cached_layers),
        "decoder_kernel_size": str(int(decoder.get("kernel_size", 21))),
        "neg_mean": ",".join(repr(float(v)) for v in neg_mean),
        "inv_stddev": ",".join(repr(float(v)) for v in inv_stddev),
        "model_type": "paraformer",
        "version": "1",
        "comment": f"funasr's streaming export of {model_dir.name}, by asr-gateway",
    }


def export(model_dir: Path, precision: Precision = "fp32", threads: int = 2) -> SherpaFiles:
    """The files of ``precision``: found, or exported (the fp32 graphs first, which the int8
    ones are quantized from)."""
    files = SherpaFiles.of(model_dir, precision)
    if files.exist() and _manifest_matches(model_dir):
        return files
    fp32 = SherpaFiles.of(model_dir, "fp32")
    fp32.directory.mkdir(exist_ok=True)
    if not (fp32.exist() and _manifest_matches(model_dir)):
        (fp32.directory / MANIFEST).unlink(missing_ok=True)
        for stale in (SherpaFiles.of(model_dir, "int8"), fp32):
            stale.encoder.unlink(missing_ok=True)
            stale.decoder.unlink(missing_ok=True)
        _export_fp32(model_dir, fp32, threads)
    if precision == "int8":
        _quantize(fp32.encoder, files.encoder)
        _quantize(fp32.decoder, files.decoder)
        set_metadata(files.encoder, metadata(model_dir))
    manifest = {
        "format": FORMAT_VERSION,
        "source": source_fingerprint(model_dir),
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_atomically(fp32.directory / MANIFEST, json.dumps(manifest, indent=1).encode())
    return files


def _manifest_matches(model_dir: Path) -> bool:
    try:
        manifest = json.loads((model_dir / SHERPA_DIR_NAME / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return bool(
        manifest.get("format") == FORMAT_VERSION
        and manifest.get("source") == source_fingerprint(model_dir)
    )


def _export_fp32(model_dir: Path, files: SherpaFiles, threads: int) -> None:
    model, kwargs = load_for_export(model_dir, threads)
    encoder_model, decoder_model = model.export(type="onnx", **kwargs)
    for module, path in ((encoder_model, files.encoder), (decoder_model, files.decoder)):
        module.eval()
        trace_to_onnx(
            module,
            module.export_dummy_inputs(),
            path,
            module.export_input_names(),
            module.export_output_names(),
            module.export_dynamic_axes(),
        )
    meta = metadata(model_dir)
    caches = [n for n in decoder_model.export_input_names() if n.startswith("in_cache_")]
    if len(caches) != int(meta["decoder_num_blocks"]):
        raise ValueError(
            f"{model_dir}: the decoder has {len(caches)} caches, the config says"
            f" {meta['decoder_num_blocks']}"
        )
    set_metadata(files.encoder, meta)
    tokens = json.loads((model_dir / "tokens.json").read_text(encoding="utf-8"))
    lines = "".join(f"{token} {index}\n" for index, token in enumerate(tokens))
    _write_atomically(files.tokens, lines.encode("utf-8"))


def set_metadata(path: Path, values: Mapping[str, str]) -> None:
    """``path``'s graph with ``values`` in its metadata (replacing keys it has), saved whole
    in one file; refused if any of its weights lie in an external file."""
    import onnx
    from onnx.external_data_helper import uses_external_data

    model = onnx.load(str(path), load_external_data=False)
    outside = [t.name for t in model.graph.initializer if uses_external_data(t)]
    if outside:
        raise ValueError(f"{path}: weights in external data ({outside[0]}, ...)")
    kept = [p for p in model.metadata_props if p.key not in values]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in values.items():
        model.metadata_props.add(key=key, value=value)
    _save_atomically(model, path)


def read_metadata(path: Path) -> dict[str, str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in model.metadata_props}


def _save_atomically(model: Any, path: Path) -> None:
    import onnx

    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        partial = Path(scratch) / path.name
        onnx.save_model(model, str(partial), save_as_external_data=False)
        os.replace(partial, path)


def _quantize(source: Path, target: Path) -> None:
    """funasr's ``export_utils._onnx`` with ``quantize=True``, step for step."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    nodes = [node.name for node in onnx.load(str(source)).graph.node]
    excluded = [n for n in nodes if "output" in n or "bias_encoder" in n or "bias_decoder" in n]
    # The quantizer logs a line per tensor it leaves alone to the root logger, which
    # funasr's import set to INFO.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        partial = Path(scratch) / target.name
        try:
            quantize_dynamic(
                model_input=str(source),
                model_output=str(partial),
                op_types_to_quantize=["MatMul"],
                per_channel=True,
                reduce_range=False,
                weight_type=QuantType.QUInt8,
                nodes_to_exclude=excluded,
            )
        finally:
            root.setLevel(level)
        os.replace(partial, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.models.export.sherpa",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--int8", action="store_true", help="also write the int8 graphs")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    started = time.monotonic()
    files = export(args.model_dir, "int8" if args.int8 else "fp32", args.threads)
    print(f"{files.encoder} and {files.decoder} ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
