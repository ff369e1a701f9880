"""The wheels the GPU machine lacks: downloaded here, carried, installed there.

Which ones, ``bench.device.requirements`` works out: the closure of pyproject's
dependencies and the test runner, for CPython 3.12 on x86-64 Linux, less what the machine
has and what no step imports, each at the version installed here (where ``--dry-run``
tests the checks). A distribution published as a source archive only is built here into a
pure-Python wheel (``SDIST_ONLY``).

    python -m bench.device.wheels download [--dir .wheels]   # here, before the device call
    python -m bench.device.wheels check                       # here: pip's dry run for 3.12
    python -m bench.device.wheels install --target /tmp/site  # there
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT
from bench.device.requirements import Closure, closure, in_wheels, installed, normalize, roots

DEFAULT_DIR = ROOT / ".wheels"
LIMIT_BYTES = 64 * 1024 * 1024  # what the device call carries: the tree and the wheels
MARGIN_BYTES = 4 * 1024 * 1024  # for files written between this check and the call

# No wheel on PyPI: built here (pure Python, so the wheel is any Python's).
SDIST_ONLY: frozenset[str] = frozenset({"antlr4-python3-runtime"})  # omegaconf's
PLATFORMS = (  # pip matches each exactly: the ones these wheels are tagged with
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "manylinux_2_5_x86_64",
)
TARGET_FLAGS = (
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *(flag for platform in PLATFORMS for flag in ("--platform", platform)),
)


@dataclass(frozen=True, slots=True)
class Wheel:
    path: Path
    name: str  # normalized
    version: str
    size: int


def wheels(directory: Path) -> list[Wheel]:
    found = []
    for path in sorted(directory.glob("*.whl")):
        name, release = path.name.split("-")[:2]
        found.append(Wheel(path, normalize(name), release, path.stat().st_size))
    return found


def pins() -> Closure:
    """What to carry (name -> the version installed here), from the requirements; its
    ``unresolved`` are requirements not installed here (``pip install -e '.[dev]'``)."""
    return closure(roots(), installed)


def carried_closure(directory: Path) -> Closure:
    """The same closure over the wheels in ``directory``, as their own metadata says: its
    ``unresolved`` are requirements no wheel there meets and the machine does not have."""
    return closure(roots(), in_wheels(w.path for w in wheels(directory)))


def tree_bytes(root: Path = ROOT) -> int:
    """What the device call carries besides the wheels: tracked files and untracked files
    git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = root / os.fsdecode(name)
        if path.is_file():
            total += path.stat().st_size
    return total


def missing(directory: Path, versions: dict[str, str]) -> list[str]:
    """The pins (name -> version) that have no wheel in ``directory``."""
    found = {(w.name, w.version) for w in wheels(directory)}
    return [f"{n}=={v}" for n, v in sorted(versions.items()) if (n, v) not in found]


def download(directory: Path) -> None:
    """Fetch what is missing, at the versions installed here; drop other wheels (two
    versions of one package stop the whole install there)."""
    wanted = pins()
    if wanted.unresolved:
        raise SystemExit(f"not installed here: {', '.join(wanted.unresolved)}")
    directory.mkdir(parents=True, exist_ok=True)
    for wheel in wheels(directory):
        if wanted.carried.get(wheel.name) != wheel.version:
            wheel.path.unlink()
    todo = [pin.partition("==") for pin in missing(directory, wanted.carried)]
    binary = [f"{name}=={release}" for name, _, release in todo if name not in SDIST_ONLY]
    source = [f"{name}=={release}" for name, _, release in todo if name in SDIST_ONLY]
    pip = [sys.executable, "-m", "pip"]
    if binary:
        subprocess.run(
            [*pip, "download", "-q", "--no-deps", *TARGET_FLAGS, "-d", str(directory), *binary],
            check=True,
        )
    if source:
        build = [*pip, "wheel", "-q", "--no-deps", "-w", str(directory), *source]
        subprocess.run(build, check=True)


def check(directory: Path) -> None:
    """pip's dry run of the device's install, for CPython 3.12 on manylinux: every wheel is
    one pip there would take."""
    with tempfile.TemporaryDirectory() as target:
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--no-index"),
                *("--no-deps", *TARGET_FLAGS, "--target", target),
                *(str(w.path) for w in wheels(directory)),
            ],
            check=True,
        )


def install(directory: Path, target: Path) -> float:
    """Install every wheel into ``target`` (put on PYTHONPATH by the caller); seconds."""
    started = time.monotonic()
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"),
            *("--no-compile", "--no-cache-dir", "--upgrade", "--target", str(target)),
            *(str(w.path) for w in wheels(directory)),
        ],
        check=True,
    )
    return time.monotonic() - started


def problems(directory: Path, here: bool) -> list[str]:
    """What is wrong with the wheels in ``directory``: a requirement no wheel meets; here,
    also a pin without its wheel, a wheel of another version than the one installed here,
    and tree and wheels too big to carry (there is no git checkout there)."""
    found = wheels(directory)
    wrong = [f"no wheel meets {u}" for u in carried_closure(directory).unresolved]
    if not here:
        return wrong
    versions = pins().carried
    wrong += [f"missing: {pin}" for pin in missing(directory, versions)]
    wrong += [
        f"not the version installed here (download drops it): {w.path.name}"
        for w in found
        if versions.get(w.name) != w.version
    ]
    total = sum(w.size for w in found) + tree_bytes()
    if total > LIMIT_BYTES - MARGIN_BYTES:
        wrong.append(f"too big to carry: {total / 2**20:.1f} MiB with the tree, of 64 MiB")
    return wrong


def report(directory: Path, here: bool = True) -> int:
    """Print the list, the sizes and what is wrong; non-zero when something is."""
    found = wheels(directory)
    for wheel in found:
        print(f"{wheel.path.name}  {wheel.size / 2**20:.2f} MiB")
    line = f"{len(found)} wheels, {sum(w.size for w in found) / 2**20:.2f} MiB"
    if here:
        line += f"; the tree {tree_bytes() / 2**20:.2f} MiB, of 64 MiB with the wheels"
    print(line)
    wrong = problems(directory, here)
    for problem in wrong:
        print(problem, file=sys.stderr)
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.device.wheels",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["download", "check", "install", "list"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--target", type=Path, default=Path("/tmp/site"))
    args = parser.parse_args(argv)
    if args.action == "download":
        download(args.dir)
    elif args.action == "check":
        check(args.dir)
    elif args.action == "install":
        print(f"installed in {install(args.dir, args.target):.1f} s into {args.target}")
    return report(args.dir, here=args.action != "install")


if __name__ == "__main__":
    sys.exit(main())
