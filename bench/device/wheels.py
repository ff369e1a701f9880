"""The wheels the GPU machine lacks: downloaded here, carried, installed there.

The GPU machine has Python 3.12 with CUDA torch, onnxruntime, numpy, anyio, httpx, h11,
pyyaml, prometheus-client, uvloop, pytest and more, but no funasr, starlette, uvicorn or
websockets, and no network. ``NAMES`` is the least that our code paths there import beyond
what it has (found by running them with only that machine's packages beside these): the
synthetic model build and export and the PyTorch engine (funasr's AutoModel imports
omegaconf, kaldiio, librosa, soundfile and rapidfuzz at import time), the ONNX engine's
frontend (kaldi-native-fbank, funasr's postprocess file), the gateway (starlette, uvicorn,
websockets, python-multipart, soxr) and the tests' conftest (starlette's test client).
funasr's other requirements (modelscope, jieba, hydra, ...) it skips when missing.

Each is fetched at the version installed here, where ``--dry-run`` tests the checks.

    python -m bench.device.wheels download [--dir .wheels]   # here, before the device call
    python -m bench.device.wheels check                       # here: pip's dry run for 3.12
    python -m bench.device.wheels install --target /tmp/site  # there
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from bench.common import ROOT

DEFAULT_DIR = ROOT / ".wheels"
LIMIT_BYTES = 64 * 1024 * 1024  # what the device call carries: the tree and the wheels
MARGIN_BYTES = 4 * 1024 * 1024  # for files written between this check and the call

# Built for CPython 3.12 on manylinux x86_64 (or pure Python).
NAMES: tuple[str, ...] = (
    "funasr",
    "omegaconf",
    "kaldiio",
    "librosa",
    "soundfile",
    "cffi",  # soundfile's
    "rapidfuzz",  # funasr.metrics, imported by the Paraformer models
    "kaldi-native-fbank",
    "starlette",
    "uvicorn",
    "websockets",
    "python-multipart",
    "soxr",
)
# Published as a source archive only: built here into a pure-Python wheel.
SDIST_NAMES: tuple[str, ...] = ("antlr4-python3-runtime",)  # omegaconf's
# What must import there once they are installed (module names).
IMPORTS: tuple[str, ...] = (
    "funasr",
    "omegaconf",
    "antlr4",
    "kaldiio",
    "librosa",
    "soundfile",
    "rapidfuzz",
    "kaldi_native_fbank",
    "starlette",
    "uvicorn",
    "websockets",
    "python_multipart",
    "soxr",
)
PLATFORMS = (  # pip matches each exactly: the ones these wheels are tagged with
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
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


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    """Normalized name -> the version installed here."""
    return {normalize(name): version(name) for name in (*NAMES, *SDIST_NAMES)}


def wheels(directory: Path) -> list[Wheel]:
    found = []
    for path in sorted(directory.glob("*.whl")):
        name, release = path.name.split("-")[:2]
        found.append(Wheel(path, normalize(name), release, path.stat().st_size))
    return found


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


def missing(directory: Path, versions: dict[str, str] | None = None) -> list[str]:
    """What has no wheel in ``directory``: of ``versions`` (name -> version), or there,
    where none is installed to compare with, of each name."""
    have = wheels(directory)
    if versions is None:
        names = {w.name for w in have}
        return [n for n in map(normalize, (*NAMES, *SDIST_NAMES)) if n not in names]
    found = {(w.name, w.version) for w in have}
    return [f"{n}=={v}" for n, v in versions.items() if (n, v) not in found]


def download(directory: Path) -> None:
    """Fetch what is missing, at the versions installed here; drop other wheels (two
    versions of one package stop the whole install there)."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = pins()
    for wheel in wheels(directory):
        if wanted.get(wheel.name) != wheel.version:
            wheel.path.unlink()
    todo = set(missing(directory, wanted))
    binary = [f"{n}=={wanted[normalize(n)]}" for n in NAMES]
    source = [f"{n}=={wanted[normalize(n)]}" for n in SDIST_NAMES]
    pip = [sys.executable, "-m", "pip"]
    if fetch := [p for p in binary if _key(p) in todo]:
        subprocess.run(
            [*pip, "download", "-q", "--no-deps", *TARGET_FLAGS, "-d", str(directory), *fetch],
            check=True,
        )
    if build := [p for p in source if _key(p) in todo]:
        subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", str(directory), *build], check=True)


def _key(pin: str) -> str:
    name, _, pinned = pin.partition("==")
    return f"{normalize(name)}=={pinned}"


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


def report(directory: Path, with_tree: bool = True) -> int:
    """Print the list and the sizes; non-zero when a pin is missing or, with the tree
    (here: there is no git checkout there), when tree and wheels are too big to carry."""
    found = wheels(directory)
    for wheel in found:
        print(f"{wheel.path.name}  {wheel.size / 2**20:.2f} MiB")
    wheel_bytes = sum(w.size for w in found)
    line = f"{len(found)} wheels, {wheel_bytes / 2**20:.2f} MiB"
    total = wheel_bytes
    if with_tree:
        tree = tree_bytes()
        total += tree
        line += (
            f"; the tree {tree / 2**20:.2f} MiB; together {total / 2**20:.2f}"
            f" of {LIMIT_BYTES / 2**20:.0f} MiB"
        )
    print(line)
    versions = pins() if with_tree else None
    absent = missing(directory, versions)
    if absent:
        print(f"missing: {', '.join(absent)}", file=sys.stderr)
        return 1
    stray = [w.path.name for w in found if versions and versions.get(w.name) != w.version]
    if stray:
        print(f"not installed here (download drops them): {', '.join(stray)}", file=sys.stderr)
        return 1
    if total > LIMIT_BYTES - MARGIN_BYTES:
        print("too big to carry: the device call takes 64 MiB in all", file=sys.stderr)
        return 1
    return 0


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
    return report(args.dir, with_tree=args.action != "install")


if __name__ == "__main__":
    sys.exit(main())
