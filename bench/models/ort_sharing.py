"""What N worker processes of one ONNX graph hold, and what ONNX Runtime lets them share.

Three ways to load the same graph (the export's encoder, say), each in N spawned
processes that run it once, then each process's RSS and PSS (``/proc/PID/smaps_rollup``),
and one process's time per run at batch 1 and 8 (one thread):

- ``inline``: the export as it is, its weights inside the ``.onnx`` protobuf;
- ``external``: the same weights in a file beside it, each tensor at a 64 KiB-aligned
  offset, which ONNX Runtime maps into memory instead of copying;
- ``external-unpacked``: that, with ``session.disable_prepacking``: MLAS's prepacked copy
  of each MatMul weight is per process; without it the mapped file's pages are the
  weights, shared by every process through the page cache;
- ``mapped-copy``: what the workers load (``workers.engines.runtime.mapped_copy``): the
  graph as ONNX Runtime optimizes it, saved with its prepacked weights in an aligned
  external file, which every process maps: prepacked, and shared.

    M=~/.cache/asr-gateway/models/synthetic-streaming-large-seed0
    python -m bench.models.ort_sharing $M/onnx-gateway/encoder.onnx --workers 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import numpy as np

from workers.engines.runtime.mapped_copy import mapped_copy

ALIGN = 65536  # ONNX Runtime maps an external tensor whose offset is page-aligned
SMALL = 1024  # tensors under this stay inline
FRAMES = 30  # the dynamic axes' length in the probe's input


def write_external(source: Path, directory: Path) -> Path:
    """``source`` with its large tensors in ``weights.bin`` beside the copy, aligned."""
    import onnx

    model = onnx.load(str(source))
    position = 0
    with (directory / "weights.bin").open("wb") as out:
        for tensor in model.graph.initializer:
            if not tensor.HasField("raw_data") or len(tensor.raw_data) < SMALL:
                continue
            padding = -position % ALIGN
            out.write(b"\0" * padding)
            position += padding
            raw = tensor.raw_data
            out.write(raw)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            del tensor.external_data[:]
            for key, value in (("location", "weights.bin"), ("offset", position)):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, str(value)
            entry = tensor.external_data.add()
            entry.key, entry.value = "length", str(len(raw))
            position += len(raw)
    target = directory / source.name
    onnx.save(model, str(target))
    return target


def _session(path: Path, options: dict[str, str]) -> Any:
    import onnxruntime

    settings = onnxruntime.SessionOptions()
    settings.intra_op_num_threads = settings.inter_op_num_threads = 1
    settings.enable_cpu_mem_arena = False  # as the workers' sessions (onnx_session)
    for key, value in options.items():
        settings.add_session_config_entry(key, value)
    return onnxruntime.InferenceSession(str(path), settings, providers=["CPUExecutionProvider"])


def _feeds(session: Any, batch: int) -> dict[str, np.ndarray[Any, Any]]:
    feeds: dict[str, np.ndarray[Any, Any]] = {}
    for given in session.get_inputs():
        shape = [
            axis if isinstance(axis, int) else (batch if n == 0 else FRAMES)
            for n, axis in enumerate(given.shape)
        ]
        if "int" in given.type:
            feeds[given.name] = np.full(shape, FRAMES, dtype=np.int32)
        else:
            feeds[given.name] = np.random.default_rng(0).random(shape, dtype=np.float32)
    return feeds


def _worker(path: Path, options: dict[str, str], ready: Event, done: Event) -> None:
    session = _session(path, options)
    session.run(None, _feeds(session, 1))
    ready.set()
    done.wait()


def _rollup(pid: int) -> dict[str, int]:
    """RSS and PSS in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("Rss", "Pss"):
            fields[name] = int(rest.split()[0]) // 1024
    return fields


def memory(path: Path, options: dict[str, str], workers: int) -> list[dict[str, int]]:
    context = multiprocessing.get_context("spawn")
    started = []
    for _ in range(workers):
        ready, done = context.Event(), context.Event()
        process = context.Process(target=_worker, args=(path, options, ready, done))
        process.start()
        started.append((process, ready, done))
    try:
        for _, ready, _ in started:
            ready.wait(600)
        return [_rollup(process.pid or 0) for process, _, _ in started]
    finally:
        for process, _, done in started:
            done.set()
            process.join()


def speed(path: Path, options: dict[str, str], batch: int, runs: int = 10) -> float:
    """Milliseconds a run, after one to warm up."""
    session = _session(path, options)
    feeds = _feeds(session, batch)
    session.run(None, feeds)
    started = time.perf_counter()
    for _ in range(runs):
        session.run(None, feeds)
    return (time.perf_counter() - started) / runs * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models.ort_sharing")
    parser.add_argument("model", type=Path, help="an exported .onnx graph")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        external = write_external(args.model, Path(scratch))
        linked = Path(scratch) / "linked" / args.model.name
        linked.parent.mkdir()
        linked.symlink_to(args.model.resolve())  # its mapped copy is made in the scratch
        ways = {
            "inline": (args.model, {}),
            "external": (external, {}),
            "external-unpacked": (external, {"session.disable_prepacking": "1"}),
            "mapped-copy": (mapped_copy(linked), {}),
        }
        print(f"{args.model}, {args.workers} processes")
        print("| load | RSS each (MiB) | PSS each | PSS in all | batch 1 ms | batch 8 ms |")
        print("|---|---|---|---|---|---|")
        for name, (path, options) in ways.items():
            stats = memory(path, options, args.workers)
            print(
                f"| {name} | {stats[0]['Rss']} | {stats[0]['Pss']}"
                f" | {sum(s['Pss'] for s in stats)} | {speed(path, options, 1):.0f}"
                f" | {speed(path, options, 8):.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
