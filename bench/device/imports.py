"""Import each module the check's steps use, and check each carried distribution's
requirements against what is installed, in a fresh interpreter (the wheels step runs it
there after the install, and here in the dry run). One JSON report:
``{"failed_imports": ["module: Error: why", ...], "unmet": ["name: requirement", ...]}``.

It reports into a file, not stdout: funasr prints to stdout as it imports.

    python -m bench.device.imports --report FILE [--distributions a,b] MODULE...
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path


def failed_imports(modules: list[str]) -> list[str]:
    """Each module that does not import, with the last line of its error: an import that
    fails names the module it could not find (``No module named 'omegaconf'``)."""
    failed = []
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException as exc:  # a SystemExit at import is a failure too
            failed.append(f"{module}: {type(exc).__name__}: {str(exc)[:300]}")
    return failed


def unmet_requirements(names: list[str]) -> list[str]:
    """Each requirement of ``names`` (in this interpreter's markers) that nothing installed
    satisfies: absent, or at a version outside its specifier."""
    from packaging.requirements import Requirement

    unmet = []
    for name in names:
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            unmet.append(f"{name}: not installed")
            continue
        for line in requires:
            needed = Requirement(line)
            if needed.marker is not None and not needed.marker.evaluate({"extra": ""}):
                continue
            try:
                have = version(needed.name)
            except PackageNotFoundError:
                unmet.append(f"{name}: {needed} (absent)")
                continue
            if not needed.specifier.contains(have, prereleases=True):
                unmet.append(f"{name}: {needed} (installed: {have})")
    return unmet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.device.imports", description=__doc__)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("--distributions", default="", help="comma-separated, carried")
    parser.add_argument("modules", nargs="*")
    args = parser.parse_args(argv)
    names = [name for name in args.distributions.split(",") if name]
    report = {"failed_imports": failed_imports(args.modules), "unmet": unmet_requirements(names)}
    args.report.write_text(json.dumps(report, indent=1))
    return 0 if not (report["failed_imports"] or report["unmet"]) else 1


if __name__ == "__main__":
    sys.exit(main())
