"""A copy of an ONNX graph whose weights every worker process maps from one file.

ONNX Runtime copies a graph's weights onto each process's heap: the initializers inside a
``.onnx`` file, and a second, "prepacked" copy of every MatMul weight in the layout its
kernels read (MLAS). N workers of one model hold N copies of both. The copy made here is
the graph as ONNX Runtime optimizes it for this machine, saved with its initializers and
their prepacked forms in an external data file, each at an aligned offset
(``session.save_external_prepacked_constant_initializers``). A session on the copy maps
that file read-only instead of copying it, so the weights are pages of the page cache,
shared by every process that maps them; the prepacked forms are used as they are, and the
original initializers they were packed from are never read (measured in BENCHMARKS.md,
"Memory: what ONNX Runtime lets worker processes share": the large int8 encoder, 322 MiB
PSS a process inline, 131 mapped; the same outputs bit for bit, at the same speed).

The copy is made once, for the first worker to open the graph (the others wait for it on a
lock), by a short-lived process of its own, and kept beside the graph under ``mapped/``.
Its name holds what it depends on: the graph's size and modification time, the onnxruntime
version, and this CPU's model and feature flags (prepacked layouts follow the kernels MLAS
picks for the CPU), so a copy made elsewhere is never read; copies of an older state of
the same graph are removed when a new one is made. The graph is saved at the extended
optimization level (fusions, no hardware-specific layouts); a session loading it still
runs every level.

Where no copy can be made (a read-only model directory, a full disk), the graph is opened
as it is, with one log line saying why: the worker holds its own copy, as before.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAPPED_DIR = "mapped"
GRAPH = "model.onnx"
WEIGHTS = "weights.bin"
# Initializers smaller than this stay inside the graph: mapping them saves nothing.
SMALLEST_MAPPED_BYTES = 1024


def mapped_copy(source: Path) -> Path:
    """The graph to open for ``source`` on this machine's CPU: its mapped copy, made now if
    there is none, or ``source`` itself where none can be made."""
    import onnxruntime as ort

    directory = source.parent / MAPPED_DIR
    target = directory / f"{source.stem}-{_copy_key(source, ort.__version__)}"
    if (target / GRAPH).is_file():
        return target / GRAPH
    try:
        directory.mkdir(exist_ok=True)
        with _locked(directory / f".{source.stem}.lock"):
            if not (target / GRAPH).is_file():  # another worker may have made it meanwhile
                _make(source, target)
                _remove_older_copies(directory, source.stem, keep=target.name)
    except Exception as exc:  # onnxruntime's own errors too: serve without a copy
        logger.warning(
            "%s: no mapped copy (%s); this worker holds its own copy of the weights",
            source,
            exc,
        )
        return source
    return target / GRAPH


def mapped_session_options(options: Any) -> Any:
    """``options`` (``onnxruntime.SessionOptions``) set to save the graph they open as a
    mapped copy; the caller names the file (``optimized_model_filepath``)."""
    import onnxruntime as ort

    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    for key, value in (
        ("session.optimized_model_external_initializers_file_name", WEIGHTS),
        (
            "session.optimized_model_external_initializers_min_size_in_bytes",
            str(SMALLEST_MAPPED_BYTES),
        ),
        ("session.save_external_prepacked_constant_initializers", "1"),
    ):
        options.add_session_config_entry(key, value)
    return options


def _make(source: Path, target: Path) -> None:
    """``target/model.onnx`` and ``target/weights.bin``, whole or not at all, made in a
    process of its own: making them loads the whole graph onto the heap, and a worker's
    allocator would keep those pages for good. What a maker killed midway left behind is
    removed first (the caller holds the lock)."""
    prefix = f".making-{source.stem}-"
    for leftover in target.parent.glob(f"{prefix}*"):
        shutil.rmtree(leftover, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=prefix))
    try:
        maker = subprocess.run(
            [sys.executable, "-m", __name__, str(source), str(scratch)],
            capture_output=True,
            text=True,
            check=False,
        )
        if maker.returncode != 0:
            last = (maker.stderr.strip().splitlines() or [f"exit {maker.returncode}"])[-1]
            raise OSError(f"making the copy failed: {last}")
        os.replace(scratch, target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def write_copy(source: Path, into: Path) -> None:
    """The copy's two files in ``into``, synced to disk (the maker process's work)."""
    import onnxruntime as ort

    options = mapped_session_options(ort.SessionOptions())
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    options.optimized_model_filepath = str(into / GRAPH)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    for name in (GRAPH, WEIGHTS):
        if not (into / name).is_file():
            # A graph with nothing large enough to map: a copy would gain nothing.
            raise OSError(f"onnxruntime wrote no {name}")
        with (into / name).open("rb") as written:
            os.fsync(written.fileno())


def _remove_older_copies(directory: Path, stem: str, keep: str) -> None:
    """Copies of ``stem`` made from another state of it (or another machine's): a process
    that still maps one keeps its pages until it closes them."""
    for other in directory.glob(f"{stem}-*"):
        if other.name != keep and other.is_dir() and _key_part(other.name, stem):
            shutil.rmtree(other, ignore_errors=True)


def _key_part(name: str, stem: str) -> bool:
    """Whether ``name`` is ``stem`` plus one key (not another graph's whose stem extends
    ``stem``: ``encoder`` and ``encoder_int8``)."""
    key = name[len(stem) + 1 :]
    return len(key) == KEY_LENGTH and all(c in "0123456789abcdef" for c in key)


KEY_LENGTH = 16


def _copy_key(source: Path, ort_version: str) -> str:
    stat = source.stat()
    digest = hashlib.sha256(
        f"{stat.st_size}:{stat.st_mtime_ns}:{ort_version}:{cpu_fingerprint()}".encode()
    )
    return digest.hexdigest()[:KEY_LENGTH]


def cpu_fingerprint() -> str:
    """This CPU's model name and feature flags, as Linux reports them (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    wanted: dict[str, str] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in ("model name", "flags", "Features", "CPU implementer", "CPU part"):
            wanted.setdefault(name, value.strip())
    return ";".join(f"{name}={value}" for name, value in sorted(wanted.items()))


class _locked:
    """An exclusive ``flock`` on ``path`` for the ``with`` block (released when the
    process dies, so a worker killed mid-copy holds no one up)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> None:
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


if __name__ == "__main__":
    write_copy(Path(sys.argv[1]), Path(sys.argv[2]))
