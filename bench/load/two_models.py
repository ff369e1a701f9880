"""Two models served at once (``ASR_MODELS``) against each alone, on the same cores.

    python -m bench.load.two_models --alone 12,16,20,24 --together 6,8,10,12 --seconds 15

Models ``a`` and ``b``: large synthetic streaming Paraformers (the real architecture, random
weights) of other seeds and vocabularies, on ONNX Runtime int8, two CPU workers each.

1. Start-up: the gateway's time from launch to ``/readyz`` 200, serving one, two and three
   models (a third, ``c``, of another seed; each model's pools load at once; the models are
   built and exported before, so this is the workers' loading alone).
2. Alone: a gateway serving one model; real-time streams at each ``--alone`` level, its
   capacity the most with p95 per-chunk latency under ``--bar-ms`` and no errors.
3. Together: a gateway serving both; ``N`` streams of each at once, for each
   ``--together`` level; the capacity the most ``N`` with both models under the bar.

No interference would put the together capacity at half of each alone's (``2N`` streams
on the cores that took the alone capacity). The gateway's CPU (its process and workers) per
audio hour at each point says what each stream costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import procfs
from bench.common.gateway import Gateway, served
from bench.common.report import header, row
from bench.load import ws_load
from bench.load.ws_stream import StreamRecord
from shared.gc_tuning import latency_tuned_gc
from shared.settings_table import MODEL_CACHE
from workers.models.synthetic.base import ModelSize

READY_TIMEOUT_S = 1200.0  # the first run builds and exports the large models


@dataclass(frozen=True, slots=True)
class ModelLoad:
    model: str
    streams: int
    errors: int
    chunk_p50_ms: float
    chunk_p95_ms: float
    chunk_p99_ms: float
    audio_s: float


@dataclass(frozen=True, slots=True)
class Point:
    served: str  # "a", "b" or "a+b"
    loads: tuple[ModelLoad, ...]
    gateway_cpu_s: float  # the gateway process and its workers
    wall_s: float

    @property
    def cpu_s_per_audio_hour(self) -> float:
        audio = sum(load.audio_s for load in self.loads)
        return self.gateway_cpu_s / audio * 3600 if audio else float("nan")


def model_dirs(cache: Path, size: ModelSize) -> dict[str, Path]:
    """The two models, built into the cache once."""
    from workers.models.synthetic.paraformer import build_model_dir

    dirs = {}
    # c shares a's characters: the large vocabulary fits the CJK block twice only.
    for name, seed, vocabulary in (("a", 0, 0), ("b", 1, 1), ("c", 2, 0)):
        target = cache / f"synthetic-streaming-{size}-seed{seed}-vocabulary{vocabulary}"
        if not (target / "model.pt").is_file():
            print(f"building model {name} in {target}", file=sys.stderr, flush=True)
            build_model_dir(target, "streaming", size, seed=seed, vocabulary=vocabulary)
        dirs[name] = target
    return dirs


def models_file(path: Path, dirs: dict[str, Path], names: Sequence[str]) -> Path:
    lines = [f'default = "{names[0]}"', ""]
    for name in names:
        lines += [
            f"[models.{name}]",
            f'model = "{dirs[name]}"',
            'engine = "paraformer-onnx"',
            'onnx_precision = "int8"',
            'devices = ["cpu", "cpu"]',
            "",
        ]
    path.write_text("\n".join(lines))
    return path


def start(folder: Path, dirs: dict[str, Path], names: Sequence[str]) -> tuple[Gateway, float]:
    """A gateway serving ``names``; how long it took to be ready."""
    path = models_file(folder / f"models-{'-'.join(names)}.toml", dirs, names)
    started = time.perf_counter()
    gateway = served({"ASR_MODELS": str(path)}, ready_timeout=READY_TIMEOUT_S)
    return gateway, time.perf_counter() - started


def load_args(
    gateway: Gateway, model: str, streams: int, args: argparse.Namespace
) -> argparse.Namespace:
    url = f"{gateway.url.rstrip('/')}/?model={model}"
    argv = ["--url", url, "--streams", str(streams), "--seconds", str(args.seconds)]
    return ws_load.parse_args([*argv, "--ramp", "0.6", "--quiet"])


def measure(
    gateway: Gateway, served_names: str, streams: dict[str, int], args: argparse.Namespace
) -> Point:
    """``streams[model]`` real-time streams of each model, all at once."""

    async def everything() -> list[list[StreamRecord]]:
        loads = [ws_load.run_load(load_args(gateway, m, n, args)) for m, n in streams.items()]
        return list(await asyncio.gather(*loads))

    cpu_before = procfs.family_cpu_seconds(gateway.pid)
    started = time.perf_counter()
    with latency_tuned_gc():
        results = asyncio.run(everything())
    wall = time.perf_counter() - started
    cpu = procfs.family_cpu_seconds(gateway.pid) - cpu_before
    loads = []
    for (model, count), records in zip(streams.items(), results, strict=True):
        summary = ws_load.summarize(records, wall, 0.0)
        loads.append(
            ModelLoad(
                model,
                count,
                summary.errors + summary.refused,
                summary.chunk_latency_ms.p50,
                summary.chunk_latency_ms.p95,
                summary.chunk_latency_ms.p99,
                summary.audio_seconds,
            )
        )
    point = Point(served_names, tuple(loads), cpu, wall)
    print(json.dumps(asdict(point)), file=sys.stderr, flush=True)
    return point


def under_bar(point: Point, bar_ms: float) -> bool:
    return all(load.errors == 0 and load.chunk_p95_ms < bar_ms for load in point.loads)


def sweep(
    gateway: Gateway,
    served_names: str,
    models: Sequence[str],
    levels: Sequence[int],
    args: argparse.Namespace,
) -> tuple[list[Point], int]:
    """Points at each level (streams of every model in ``models``) until two over the bar."""
    points, capacity, over = [], 0, 0
    for level in levels:
        point = measure(gateway, served_names, dict.fromkeys(models, level), args)
        points.append(point)
        if under_bar(point, args.bar_ms):
            capacity, over = max(capacity, level), 0
        else:
            over += 1
            if over == 2:
                break
    return points, capacity


def markdown(points: list[Point], capacity: dict[str, int], start_up: dict[str, float]) -> str:
    lines = header(
        "served",
        "model",
        "streams",
        "errors",
        "p50 / p95 / p99 chunk ms",
        "gateway CPU s per audio hour",
    )
    for point in points:
        for load in point.loads:
            latency = f"{load.chunk_p50_ms:.0f} / {load.chunk_p95_ms:.0f} / {load.chunk_p99_ms:.0f}"
            cpu = f"{point.cpu_s_per_audio_hour:.0f}"
            lines.append(row(point.served, load.model, load.streams, load.errors, latency, cpu))
    lines.append("")
    for name, streams in capacity.items():
        lines.append(f"- capacity, {name}: {streams} streams")
    for name, seconds in start_up.items():
        lines.append(f"- start-up, {name}: {seconds:.1f} s to /readyz 200")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load.two_models",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--alone", default="12,16,20,24", help="streams of one model alone")
    parser.add_argument("--together", default="6,8,10,12", help="streams of each, together")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--bar-ms", type=float, default=600.0)
    parser.add_argument("--models", default="a,b", help="which models to measure alone")
    parser.add_argument("--size", choices=["tiny", "large"], default="large")
    parser.add_argument("--out", type=Path, default=Path("bench/results/two_models"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    dirs = model_dirs(Path(MODEL_CACHE.read(os.environ)).expanduser(), args.size)
    levels = {key: [int(n) for n in getattr(args, key).split(",")] for key in ("alone", "together")}
    points: list[Point] = []
    capacity: dict[str, int] = {}
    start_up: dict[str, float] = {}
    # Cold first (it builds the ONNX exports of all three), then every start-up warm.
    for _ in range(2):
        gateway, seconds = start(args.out, dirs, ["a", "b", "c"])
        gateway.stop()
    start_up["3 models"] = seconds
    for name in args.models.split(","):
        gateway, seconds = start(args.out, dirs, [name])
        start_up.setdefault("1 model", seconds)
        try:
            found, capacity[f"{name} alone"] = sweep(gateway, name, [name], levels["alone"], args)
            points += found
        finally:
            gateway.stop()
    gateway, start_up["2 models"] = start(args.out, dirs, ["a", "b"])
    try:
        found, capacity["a+b, each"] = sweep(gateway, "a+b", ["a", "b"], levels["together"], args)
        points += found
    finally:
        gateway.stop()
    report = markdown(points, capacity, start_up)
    (args.out / "two_models.md").write_text(report + "\n")
    payload = {"points": [asdict(p) for p in points], "capacity": capacity, "start_up": start_up}
    (args.out / "two_models.json").write_text(json.dumps(payload, indent=1))
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
