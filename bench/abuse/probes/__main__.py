"""``python -m bench.abuse.probes``: run the probes, print (or write) their table."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from bench.abuse.probes import __doc__ as DOC
from bench.abuse.probes import catalog, report, runner
from bench.abuse.probes.server import PROFILE


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.abuse.probes",
        description=DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--probe", action="append", default=[], help="a probe (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the probes and exit")
    parser.add_argument(
        "--seconds", type=float, default=6.0, help="how long a probe the server does not end runs"
    )
    parser.add_argument("--victims", type=int, default=4, help="honest real-time sessions")
    parser.add_argument("--baseline", type=float, default=8.0, help="seconds of victims alone")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="VAR=VALUE",
        help="a gateway setting over every probe's (repeatable): --set ASR_GC_TUNING=0",
    )
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--json", type=Path, help="write every figure here as JSON")
    parser.add_argument("--logs", type=Path, default=runner.default_logs(), help="gateway logs")
    return parser.parse_args(argv)


def markdown(outcomes: list[runner.Outcome], groups: list[runner.Baseline]) -> str:
    profile = ", ".join(f"`{k}={v}`" for k, v in PROFILE.items())
    return (
        "\n\n".join(
            [
                "## Probes: what one client can hold, and what it costs",
                f"Command: `python -m bench.abuse.probes {' '.join(sys.argv[1:])}`",
                f"Machine: {report.machine()}.",
                f"Gateway: `uvicorn gateway.app:app --ws-per-message-deflate false`, {profile};"
                " a probe's own settings are in the baselines' table.",
                report.table(outcomes),
                "Victims alone, per gateway (the baseline each probe is compared with pools the"
                " two; their spread is the noise):",
                report.baselines(groups),
            ]
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for probe in catalog.PROBES:
            print(f"{probe.name:28} {probe.resource:16} {probe.endpoint:22} {probe.what}")
        return 0
    probes = catalog.by_name(args.probe) if args.probe else catalog.PROBES
    overrides = dict(item.split("=", 1) for item in args.set)
    probes = [replace(probe, env={**probe.env, **overrides}) for probe in probes]
    outcomes, groups = runner.run(probes, args)
    text = markdown(outcomes, groups)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(report.as_json(outcomes, groups) + "\n")
    print(text)
    return 1 if any(outcome.verdict.holds is False for outcome in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
