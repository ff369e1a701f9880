"""Where an ONNX export of a model directory lies, and whether it is up to date.

What the ``paraformer-onnx`` engine loads and ``workers.models.export`` writes:
``MODEL_DIR/onnx-gateway/`` holds ``encoder.onnx``, ``decoder.onnx`` (and their int8
``*_int8.onnx``), the positional encoding's frequencies and ``manifest.json``, which records
what they were exported from. No torch, no ONNX: the engine's worker imports this.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from shared.engines import Precision

EXPORT_DIR_NAME = "onnx-gateway"
FORMAT_VERSION = 3  # bump when what is exported changes meaning
INV_TIMESCALES = "inv_timescales.npy"  # the positional encoding's, for the torch-free host
MANIFEST = "manifest.json"


@dataclass(frozen=True, slots=True)
class OnnxFiles:
    directory: Path
    encoder: Path
    decoder: Path

    @classmethod
    def of(cls, model_dir: Path, precision: Precision) -> OnnxFiles:
        directory = model_dir / EXPORT_DIR_NAME
        suffix = "_int8" if precision == "int8" else ""
        return cls(
            directory, directory / f"encoder{suffix}.onnx", directory / f"decoder{suffix}.onnx"
        )


def source_fingerprint(model_dir: Path) -> str:
    """What the export depends on: the weights, the config and the CMVN, by size and mtime
    (hashing a 900 MB checkpoint at every start would cost seconds)."""
    digest = hashlib.sha256()
    for name in ("model.pt", "config.yaml", "am.mvn"):
        path = model_dir / name
        if path.exists():
            stat = path.stat()
            digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()


def up_to_date(model_dir: Path, precision: Precision) -> bool:
    files = OnnxFiles.of(model_dir, precision)
    try:
        manifest = json.loads((files.directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return (
        manifest.get("format") == FORMAT_VERSION
        and manifest.get("source") == source_fingerprint(model_dir)
        and files.encoder.is_file()
        and files.decoder.is_file()
        and (files.directory / INV_TIMESCALES).is_file()
    )
