"""``python -m workers.models.synthetic OUT_DIR --kind BUILD --size tiny|large``: one
random-weight model directory (the builds: ``workers.engines.kinds``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import cast

from workers.engines.kinds import synthetic_builds
from workers.models.synthetic import build_synthetic
from workers.models.synthetic.base import ParaformerBuild
from workers.models.synthetic.paraformer import build_model_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.models.synthetic",
        description="Build a random-weight model directory with a real architecture.",
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "--kind",
        choices=list(synthetic_builds()),
        default="streaming",
        help="a build of workers.engines.kinds",
    )
    parser.add_argument("--size", choices=["tiny", "large"], default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timestamps",
        action="store_true",
        help="offline: a BiCifParaformer, which also predicts token times (as --kind bicif)",
    )
    parser.add_argument(
        "--vocabulary",
        type=int,
        default=0,
        help="which characters the tokens are: models of different vocabularies share none;"
        " -1: spoken Chinese numbers only",
    )
    args = parser.parse_args(argv)
    if args.kind in ("streaming", "offline", "seaco") and (args.timestamps or args.vocabulary):
        kind = cast(ParaformerBuild, args.kind)
        path = build_model_dir(
            args.out_dir, kind, args.size, args.seed, args.timestamps, args.vocabulary
        )
    else:
        path = build_synthetic(args.kind, args.out_dir, args.size, args.seed)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
