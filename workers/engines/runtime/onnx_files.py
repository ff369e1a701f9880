"""Where an ONNX export of a model directory lies, and whether it is up to date.

What the ``paraformer-onnx`` engine loads and ``workers.models.export.paraformer`` writes:
``MODEL_DIR/onnx-gateway/`` holds ``encoder.onnx``, ``decoder.onnx`` (their int8
``*_int8.onnx``, and the QDQ int8 ``*_int8_qdq.onnx`` that ``paraformer-openvino`` reads),
the positional encoding's frequencies and ``manifest.json``, which records what they were
exported from. No torch, no ONNX: the engine's worker imports this.
A CT-Transformer's directory holds its punctuation export there instead
(``PuncOnnxFiles``, written by ``workers.models.export.punctuation``), under a manifest of its
own kind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shared.engines import Precision

EXPORT_DIR_NAME = "onnx-gateway"
FORMAT_VERSION = 4  # bump when what is exported changes meaning (4: int8 weights in 7 bits)
INV_TIMESCALES = "inv_timescales.npy"  # the positional encoding's, for the torch-free host
MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class OnnxFiles:
    directory: Path
    encoder: Path
    decoder: Path

    @classmethod
    def of(cls, model_dir: Path, precision: Precision, qdq: bool = False) -> OnnxFiles:
        """``qdq``: int8 as QuantizeLinear/DequantizeLinear pairs around fp32 MatMuls, the
        form OpenVINO reads as its own int8 (it cannot read ORT's QLinearMatMul)."""
        directory = model_dir / EXPORT_DIR_NAME
        suffix = ("_int8_qdq" if qdq else "_int8") if precision == "int8" else ""
        return cls(
            directory, directory / f"encoder{suffix}.onnx", directory / f"decoder{suffix}.onnx"
        )


def source_fingerprint(
    model_dir: Path, names: Sequence[str] = ("model.pt", "config.yaml", "am.mvn")
) -> str:
    """What the export depends on: the weights, the config and the CMVN, by size and mtime
    (hashing a 900 MB checkpoint at every start would cost seconds). ``names``: the files
    of the model directory it depends on (a CT-Transformer's: :data:`PUNC_SOURCES`)."""
    digest = hashlib.sha256()
    for name in names:
        path = model_dir / name
        if path.exists():
            stat = path.stat()
            digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()


def up_to_date(model_dir: Path, precision: Precision, qdq: bool = False) -> bool:
    files = OnnxFiles.of(model_dir, precision, qdq)
    try:
        manifest = json.loads((files.directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("kind") == OFFLINE_KIND:  # an offline model directory's export
        return _offline_up_to_date(model_dir, precision, manifest)
    return (
        manifest.get("format") == FORMAT_VERSION
        and manifest.get("source") == source_fingerprint(model_dir)
        and files.encoder.is_file()
        and files.decoder.is_file()
        and (files.directory / INV_TIMESCALES).is_file()
    )


# -- a CT-Transformer punctuation model's export (``workers.models.export.punctuation``) ----

PUNC_FORMAT_VERSION = 1  # bump when what the punctuation export holds changes meaning
PUNC_KIND = "ct-transformer"  # the manifest's "kind": not a streaming Paraformer's export
# What funasr reads from a CT-Transformer directory: the export copies what it resolved
# from them (the vocabulary, the punctuation classes, the jieba dictionary).
PUNC_SOURCES = (
    "model.pt",
    "config.yaml",
    "configuration.json",
    "tokens.json",
    "tokens.txt",
    "jieba_usr_dict",
)
PUNC_META = "punctuation.json"  # what the host side needs (see export_punc's docstring)
PUNC_JIEBA_DICT = "jieba_usr_dict"  # a copy of the model's, where it has one


@dataclass(frozen=True, slots=True)
class PuncOnnxFiles:
    """``MODEL_DIR/onnx-gateway/`` of a CT-Transformer: ``punc.onnx`` (token ids and
    lengths in, every token's punctuation logits out), ``punctuation.json`` and, for a
    word-level model, a copy of its ``jieba_usr_dict``."""

    directory: Path
    model: Path
    meta: Path
    jieba_dict: Path

    @classmethod
    def of(cls, model_dir: Path) -> PuncOnnxFiles:
        directory = model_dir / EXPORT_DIR_NAME
        return cls(
            directory, directory / "punc.onnx", directory / PUNC_META, directory / PUNC_JIEBA_DICT
        )


def punc_up_to_date(model_dir: Path) -> bool:
    """Whether ``MODEL_DIR/onnx-gateway/`` holds a punctuation export of the directory as it
    is now (cheap: the pool may ask at every start)."""
    files = PuncOnnxFiles.of(model_dir)
    try:
        manifest = json.loads((files.directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return (
        manifest.get("kind") == PUNC_KIND
        and manifest.get("format") == PUNC_FORMAT_VERSION
        and manifest.get("source") == source_fingerprint(model_dir, PUNC_SOURCES)
        and files.model.is_file()
        and files.meta.is_file()
    )


# -- the offline (whole-utterance) Paraformer: one graph, speech -> logits + token counts --

OFFLINE_KIND = "offline"  # the manifest's "kind"; the streaming export's manifest has none
OFFLINE_FORMAT_VERSION = 2  # bump when what the offline export writes changes meaning (2: as 4)


@dataclass(frozen=True, slots=True)
class OfflineOnnxFiles:
    """What ``paraformer-offline-onnx`` loads: ``model.onnx`` (or ``model_int8.onnx``), in
    the same ``onnx-gateway/`` directory and under the same ``manifest.json``."""

    directory: Path
    model: Path

    @classmethod
    def of(cls, model_dir: Path, precision: Precision) -> OfflineOnnxFiles:
        directory = model_dir / EXPORT_DIR_NAME
        suffix = "_int8" if precision == "int8" else ""
        return cls(directory, directory / f"model{suffix}.onnx")


def _offline_up_to_date(model_dir: Path, precision: Precision, manifest: dict[str, object]) -> bool:
    return (
        manifest.get("format") == OFFLINE_FORMAT_VERSION
        and manifest.get("source") == source_fingerprint(model_dir)
        and OfflineOnnxFiles.of(model_dir, precision).model.is_file()
    )


def require_export(model_dir: Path, precision: Precision, qdq: bool = False) -> None:
    """Refuse to load a Paraformer (either kind) whose export is missing or stale."""
    if not up_to_date(model_dir, precision, qdq):
        int8 = " --int8" + (" --qdq" if qdq else "") if precision == "int8" else ""
        raise FileNotFoundError(
            f"no up-to-date {precision}{' QDQ' if qdq and int8 else ''} ONNX export in"
            f" {model_dir}: run python -m workers.models.export {model_dir}{int8}"
        )
