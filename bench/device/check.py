"""The GPU machine's checks, one subcommand per step; ``bench/device/check.sh`` runs them.

Each subcommand writes its record into ``--work`` (``bench.device.records``) and ``table``
makes the one Markdown table of them all. Heavy imports (torch, funasr, onnxruntime) stay
inside the steps: ``wheels`` runs before funasr is installed, and ``fail`` and ``table``
must work whatever broke.

    python -m bench.device.check env --device cuda:0
    python -m bench.device.check fidelity --model DIR --device cuda:0 --streams 16
    python -m bench.device.check table --out OUT

Steps, numbered as the table and ``check.sh`` number them (the number opens each record's
key, ``records.KEYS``):

- 0 ``env``, 1 ``wheels``, 2 ``cuda-tests``: ``bench.device.machine``;
- 3 ``model`` (3a), ``fidelity`` fp32 (3b) and int8 (3c): ``bench.device.fidelity``;
- 4 the placement and 5 the sweep of ``gateway --run gateway`` (two workers) and
  ``--run gateway-1`` (one): ``bench.device.gateway``;
- 5 ``ceiling``: ``bench.device.ceiling``;
- 6 ``table``: ``bench.device.table``, with the target's line and the workers compared
  (``bench.device.target``).

Each step's deadline is ``--deadline``, else ``$DEVICE_CHECK_DEADLINE`` (epoch seconds; the
shell sets it to the end of the step's limit), so that a step stops its own loops in time
and writes what it measured rather than being killed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from bench.device import wheels as device_wheels
from bench.device.ceiling import ceiling_step
from bench.device.fidelity import fidelity_step, model_step
from bench.device.gateway import add_arguments, gateway_step
from bench.device.machine import cuda_tests_step, env_step, wheels_step
from bench.device.records import KEYS, StepRecord, read_records, write_record
from bench.device.table import with_derived, write_table


def _stop_on_sigterm() -> None:
    """``timeout`` sends SIGTERM: leave through ``finally`` (records written, servers
    stopped) rather than die where we stand."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


# -- the shell's helpers -----------------------------------------------------------------


def fail_step(args: argparse.Namespace) -> StepRecord:
    """The record of a step the shell had to stop or skip; rows it wrote stay."""
    key = KEYS[args.step]
    existing = next((r for r in read_records(args.work) if r.key == key), None)
    if existing is not None and existing.status != "ok":
        return existing
    rows = existing.rows if existing else []
    data = existing.data if existing else {}
    seconds = existing.seconds if existing else 0.0
    return StepRecord(key, args.status, seconds, rows, data, args.note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.device.check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    steps = parser.add_subparsers(dest="step", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--work", type=Path, default=Path("/tmp/device-check"))
    common.add_argument("--device", default="cuda:0")
    common.add_argument("--model", type=Path)
    common.add_argument("--threads", type=int, default=1)
    deadline = float(os.environ.get("DEVICE_CHECK_DEADLINE", "inf"))
    common.add_argument("--deadline", type=float, default=deadline, help="epoch seconds")
    common.add_argument(
        "--dry-run", action="store_true", help="the CPU stands in for the GPU, and rows say so"
    )

    engines = ["paraformer-onnx", "paraformer"]
    env = steps.add_parser("env", parents=[common])
    env.add_argument("--engine", choices=["auto", *engines], default="auto")
    wheels = steps.add_parser("wheels", parents=[common])
    wheels.add_argument("--dir", type=Path, default=device_wheels.DEFAULT_DIR)
    wheels.add_argument("--target", type=Path, default=Path("/tmp/site"))
    wheels.add_argument("--check", action="store_true", help="pip's dry run, no install")
    wheels.add_argument(
        "--also-import", action="append", default=[], help="a module to import besides ours"
    )
    cuda = steps.add_parser("cuda-tests", parents=[common])
    cuda.add_argument("--timeout", type=float, default=300.0)
    model = steps.add_parser("model", parents=[common])
    model.add_argument("--size", choices=["tiny", "large"], default="large")
    model.add_argument("--models", type=Path, default=Path("/tmp/asr-models"))
    model.add_argument("--export", action=argparse.BooleanOptionalAction, default=True)
    fidelity = steps.add_parser("fidelity", parents=[common])
    fidelity.add_argument("--engine", choices=engines, default="paraformer-onnx")
    fidelity.add_argument("--precision", choices=["fp32", "int8"], default="fp32")
    fidelity.add_argument("--streams", type=int, default=16)
    ceiling = steps.add_parser("ceiling", parents=[common])
    ceiling.add_argument("--engine", choices=engines, default="paraformer-onnx")
    ceiling.add_argument("--points", default="1x16,1x32,1x64,2x64", help="PROCESSESxSTREAMS")
    ceiling.add_argument("--seconds", type=float, default=10.0)
    gateway = steps.add_parser("gateway", parents=[common])
    gateway.add_argument("--engine", choices=engines, default="paraformer-onnx")
    add_arguments(gateway)
    fail = steps.add_parser("fail", parents=[common])
    fail.add_argument("--for", dest="step_name", required=True, choices=sorted(KEYS))
    fail.add_argument("--status", choices=["failed", "skipped"], default="failed")
    fail.add_argument("--note", default="")
    table = steps.add_parser("table", parents=[common])
    table.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.step == "table":
        print(write_table(args.work, args.out))
        failed = [r.key for r in with_derived(read_records(args.work)) if r.status == "failed"]
        if failed:
            print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1 if failed else 0
    if args.step == "fail":
        args.step = args.step_name
        write_record(args.work, fail_step(args))
        return 0
    if args.step == "gateway":
        return gateway_step(args)
    run = {
        "env": env_step,
        "wheels": wheels_step,
        "cuda-tests": cuda_tests_step,
        "model": model_step,
        "fidelity": fidelity_step,
        "ceiling": ceiling_step,
    }[args.step]
    record = run(args)
    write_record(args.work, record)
    for row in record.rows:
        print(f"{row.check}: {row.result}")
    if record.note:
        print(f"{record.status}: {record.note}", file=sys.stderr)
    return 0 if record.status == "ok" else 1


if __name__ == "__main__":
    _stop_on_sigterm()
    sys.exit(main())
