"""``python -m bench.reliability.descriptors table|haproxy|idle``: one JSON object on stdout."""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import bench.reliability.descriptors
from bench.common import ROOT
from bench.reliability.descriptors.behind_haproxy import HaproxyRun, haproxy
from bench.reliability.descriptors.idle import IdleRun, idle
from bench.reliability.descriptors.table import TableRun, table

REPOSITORY = ROOT  # the checkout served unless --root says another


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    summary = (bench.reliability.descriptors.__doc__ or "").splitlines()[0]
    parser = argparse.ArgumentParser(
        prog="python -m bench.reliability.descriptors", description=summary
    )
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", type=Path, default=REPOSITORY, help="the checkout to serve")
    loops = ["auto", "uvloop", "asyncio"]  # auto: uvicorn's default (uvloop when installed)

    table_ = commands.add_parser("table", parents=[common], help="full, probed, then freed")
    table_.add_argument("--loop", choices=loops, default="uvloop")
    table_.add_argument("--nofile", type=int, default=256)
    table_.add_argument("--hold", type=float, default=5.0, help="seconds full")

    haproxy_ = commands.add_parser("haproxy", parents=[common], help="behind HAProxy")
    haproxy_.add_argument("--nofile", type=int, default=256)
    haproxy_.add_argument("--hold", type=float, default=3.0, help="seconds full")

    idle_ = commands.add_parser("idle", parents=[common], help="RSS per idle connection")
    idle_.add_argument("--loop", choices=loops, default="uvloop")
    idle_.add_argument("--nofile", type=int, default=4096)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("prlimit") is None:
        raise SystemExit("prlimit (util-linux) is needed to lower the server's RLIMIT_NOFILE")
    # The client holds as many connections as the server's table, and a few more.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2 * args.nofile)), hard))
    root: Path = args.root.resolve()
    result: TableRun | HaproxyRun | IdleRun
    # The logs go with the directory: the old checkout on asyncio logs ~80,000 lines a
    # second of a full table.
    with tempfile.TemporaryDirectory(prefix="bench-descriptors-") as directory:
        logs = Path(directory)
        if args.command == "table":
            result = table(root, args.loop, args.nofile, args.hold, logs)
        elif args.command == "haproxy":
            result = haproxy(root, args.nofile, args.hold, logs)
        else:
            result = idle(root, args.loop, args.nofile, logs)
    print(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
