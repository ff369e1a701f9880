"""Export a model directory to ONNX, once, for the engine that loads it:

    python -m workers.models.export MODEL_DIR [--int8 [--qdq]]

An offline model (a Paraformer, SenseVoiceSmall) goes to ``workers.models.export.offline``,
a streaming Paraformer to ``workers.models.export.paraformer`` (``--qdq``: the int8 form
OpenVINO reads): ``workers.models.export.dispatch``. An export up to date is found and left
as it is. The gateway runs the same exports through ``workers.models.ready``, which also
builds a synthetic model first and makes the workers' mapped copies.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from workers.models.export.dispatch import export_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.models.export", description=__doc__)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--int8", action="store_true", help="also write int8 graphs")
    parser.add_argument(
        "--qdq",
        action="store_true",
        help="with --int8: the QDQ int8 graphs that paraformer-openvino reads",
    )
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if not (args.model_dir / "config.yaml").is_file():
        print(f"{args.model_dir} is not a FunASR model directory", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        graphs = export_model(args.model_dir, args.int8, args.threads, args.qdq)
    except ValueError as exc:  # a class it does not export
        print(exc, file=sys.stderr)
        return 2
    print(f"{' and '.join(map(str, graphs))} ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
