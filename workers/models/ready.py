"""A model made ready for its workers, in one process: the synthetic build where the cache
does not hold it yet, the ONNX export where its engine loads one that is not up to date,
and the mapped copies (``workers.engines.runtime.mapped_copy``) of the graphs its CPU
workers will open, each started as soon as its graph is in place, while the export goes on.

    python -m workers.models.ready MODEL --cache DIR --role streaming \\
        --engine paraformer-onnx [--int8] [--mapped]

The pools run it in a child process (``workers.pool.prepare``): torch and funasr never enter
the gateway process, and one import of funasr (about 15 s on our 2-core machine) serves both
the build and the export, which a build in the gateway and an export in a child each paid.
The quick start's first start (BENCHMARKS.md, "The first start of the quick start's serve
command") is mostly this process. Where it fails, it exits with ``REPORTED_FAILURE`` and
its last line on stderr is the whole message the pool reports.
"""

from __future__ import annotations

import argparse
import sys
import threading
import traceback
from pathlib import Path

from shared.engines import Role
from shared.errors import WorkerLoadError
from workers.engines.kinds import ENGINES
from workers.engines.runtime.mapped_copy import mapped_copy
from workers.models.export.dispatch import export_model
from workers.models.resolve import resolve_model

# The exit status that says the last line on stderr is the failure's one-line message (a
# crash's traceback also ends with 1).
REPORTED_FAILURE = 3


class MappedCopies:
    """Mapped copies made in threads of their own (each waits on its maker process), one
    per graph, started as the export writes the graphs."""

    def __init__(self) -> None:
        self._makers: dict[Path, threading.Thread] = {}

    def start(self, graph: Path) -> None:
        if graph not in self._makers:
            maker = threading.Thread(target=mapped_copy, args=(graph,), name=f"copy {graph}")
            maker.start()
            self._makers[graph] = maker

    def wait(self) -> None:
        for maker in self._makers.values():
            maker.join()


def make_ready(
    model: str, cache: str, role: Role, engine: str, int8: bool, mapped: bool, threads: int
) -> None:
    """Raises :class:`WorkerLoadError` with the pool's one-line message."""
    resolved = resolve_model(model, cache, role)  # builds a synthetic model
    row = ENGINES.get(engine)
    if row is None or not row.exported or resolved.model_dir is None:
        return
    model_dir = Path(resolved.model_dir)
    # Mapped copies are onnxruntime's (OpenVINO reads the QDQ graphs its own way).
    copies = MappedCopies() if mapped and row.onnxruntime else None
    failure = None
    try:
        export_model(model_dir, int8, threads, row.qdq, None if copies is None else copies.start)
    except ValueError as exc:  # a model class that has no export here
        failure = str(exc)
    except Exception as exc:
        traceback.print_exc()
        failure = traceback.format_exception_only(exc)[-1].strip()
    if copies is not None:
        copies.wait()
    if failure is not None:
        raise WorkerLoadError(f"ONNX export of {model_dir} failed: {failure}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.models.ready", description=__doc__)
    parser.add_argument("model", help="as its setting names it: synthetic:large, a directory")
    parser.add_argument("--cache", required=True, help="the model cache (ASR_MODEL_CACHE)")
    parser.add_argument("--role", default=Role.STREAMING.value, choices=[r.value for r in Role])
    parser.add_argument("--engine", required=True, help="the engine its workers run")
    parser.add_argument("--int8", action="store_true", help="the int8 graphs")
    parser.add_argument("--mapped", action="store_true", help="make the CPU workers' copies")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        make_ready(
            args.model,
            args.cache,
            Role(args.role),
            args.engine,
            args.int8,
            args.mapped,
            args.threads,
        )
    except WorkerLoadError as exc:
        print(exc.message, file=sys.stderr)
        return REPORTED_FAILURE
    return 0


if __name__ == "__main__":
    sys.exit(main())
