"""The raw ceiling of the int8 streaming engine with its graphs in QOperator form (as
exported today) against QDQ form, in the same run.

    python -m bench.models.int8_formats --model synthetic:large --streams 8 --seconds 20

The QDQ graphs are quantized from the same fp32 export with the same calibration
(``workers.models.export.common.quantize_matmuls(qdq=True)``) into a copy of the model
directory (links to its files), so both runs load the same weights through the same
engine; then ``bench.models.raw_ceiling`` drives each, alternating, ``--repeat`` times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from bench.common.report import header, row
from bench.models.raw_ceiling import measure
from shared.settings import PoolSettings
from workers.engines.runtime.onnx_files import EXPORT_DIR_NAME, OnnxFiles
from workers.models.export.common import quantize_matmuls
from workers.models.export.paraformer import _calibration_feeds
from workers.models.resolve import resolve_model

ONNX_LOOK_BACK = (0, 0)  # the ONNX engine's encoder and decoder look-back, as raw_ceiling's


def qdq_copy(model_dir: Path, into: Path) -> Path:
    """``model_dir`` linked file by file into ``into``, its int8 graphs quantized as QDQ."""
    copy = into / model_dir.name
    (copy / EXPORT_DIR_NAME).mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.is_file():
            (copy / item.name).symlink_to(item)
    exported = model_dir / EXPORT_DIR_NAME
    for item in exported.iterdir():
        if "_int8" not in item.name:
            (copy / EXPORT_DIR_NAME / item.name).symlink_to(item)
    fp32, int8 = OnnxFiles.of(model_dir, "fp32"), OnnxFiles.of(copy, "int8")
    encoder_feeds, decoder_feeds = _calibration_feeds(model_dir)
    quantize_matmuls(fp32.encoder, int8.encoder, encoder_feeds, qdq=True)
    quantize_matmuls(fp32.decoder, int8.decoder, decoder_feeds, qdq=True)
    return copy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    resolved = resolve_model(args.model, PoolSettings().model_cache_dir)
    assert resolved.model_dir is not None
    model_dir = Path(resolved.model_dir)
    manifest = json.loads((model_dir / EXPORT_DIR_NAME / "manifest.json").read_text())
    if not manifest.get("int8"):
        raise SystemExit(
            f"{model_dir} has no int8 export: python -m workers.models.export DIR --int8"
        )
    with tempfile.TemporaryDirectory() as scratch:
        qdq = qdq_copy(model_dir, Path(scratch))
        rates: dict[str, list[float]] = {"QOperator (today's export)": [], "QDQ": []}
        for repeat in range(args.repeat):
            for name, directory in (("QOperator (today's export)", model_dir), ("QDQ", qdq)):
                run = measure(
                    str(directory),
                    "paraformer-onnx",
                    "int8",
                    ONNX_LOOK_BACK,
                    processes=2,
                    streams=args.streams,
                    seconds=args.seconds,
                    threads=1,
                    repeat=repeat,
                )
                rates[name].append(run.realtime_streams)
    lines = header("int8 graphs", "real-time streams (2 processes, 1 thread each)", "runs")
    for name, values in rates.items():
        lines.append(
            row(name, f"{statistics.median(values):.1f}", ", ".join(f"{v:.1f}" for v in values))
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
