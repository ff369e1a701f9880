"""The offline Paraformer under PyTorch against ONNX Runtime (fp32, int8), batched.

Each runtime runs in a process of its own, as a worker would (the ONNX engine imports
neither torch nor funasr): it loads the engine (``paraformer-offline``, or
``paraformer-offline-onnx`` at either precision), decodes ``--clips`` utterances of
``--seconds`` each (3 s: the 2pass benchmark's sentence) with ``batch`` finals per engine
step, every batch size ``--repeat`` times, and reports the wall time per utterance (median,
min-max), the CPU time per utterance (median: on a shared machine the steadier figure), and
its resident memory (after loading; the peak). The texts decoded one per call are compared:
fp32 against PyTorch (equal, where funasr decodes each utterance alone) and int8 against
fp32 (similarity).

    python -m bench.models.offline_onnx --model synthetic:large --clips 8 --batches 1,4,8

The ONNX export is made first if it is not up to date (``python -m workers.models.export``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.common import procfs
from bench.common.audio import clips
from shared.engines import Precision, Role

RUNTIMES: dict[str, tuple[str, Precision]] = {
    "pytorch": ("paraformer-offline", "fp32"),
    "onnx-fp32": ("paraformer-offline-onnx", "fp32"),
    "onnx-int8": ("paraformer-offline-onnx", "int8"),
}


def _memory_kb() -> tuple[int, int]:
    """This process's resident memory now and at its peak (VmRSS, VmHWM), in kB."""
    return procfs.rss_kib(), procfs.peak_rss_kib()


def _child(args: argparse.Namespace) -> dict[str, Any]:
    from shared.engines import EngineName
    from shared.messages import EngineSpec, StreamOptions
    from workers.engines import load_engine
    from workers.engines.base import ChunkItem

    engine_name, precision = RUNTIMES[args.child]
    spec = EngineSpec(
        EngineName(engine_name),
        model_dir=args.model_dir,
        threads=args.threads,
        precision=precision,
    )
    engine = load_engine(spec)
    loaded_kb, _ = _memory_kb()
    audio = clips(args.clips, args.seconds)
    ids = iter(range(1_000_000))

    def run(batch: int) -> tuple[float, float, list[str]]:
        texts: list[str] = []
        started, cpu = time.perf_counter(), time.process_time()
        for first in range(0, len(audio), batch):
            items = []
            for clip in audio[first : first + batch]:
                stream_id = next(ids)
                engine.open_stream(stream_id, StreamOptions())
                items.append(ChunkItem(stream_id, 0, clip, True))
            texts += [output.text for output in engine.feed(items)]
        return time.perf_counter() - started, time.process_time() - cpu, texts

    run(1)  # warm-up
    result: dict[str, Any] = {"loaded_mb": loaded_kb / 1024, "ms": {}, "cpu": {}, "texts": []}
    for batch in [int(b) for b in args.batches.split(",")]:
        times, cpu_times = [], []
        for _ in range(args.repeat):
            seconds, cpu_seconds, texts = run(batch)
            times.append(seconds / len(audio) * 1000)
            cpu_times.append(cpu_seconds / len(audio) * 1000)
            if batch == 1:
                result["texts"] = texts
        result["ms"][str(batch)] = [statistics.median(times), min(times), max(times)]
        result["cpu"][str(batch)] = statistics.median(cpu_times)
    result["peak_mb"] = _memory_kb()[1] / 1024
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.models.offline_onnx", description=__doc__
    )
    parser.add_argument("--model", default="synthetic:large")
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batches", default="1,4,8")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--child", choices=list(RUNTIMES), help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args)))
        return 0

    from shared.settings import PoolSettings
    from workers.models.resolve import resolve_model

    resolved = resolve_model(args.model, PoolSettings().model_cache_dir, Role.OFFLINE)
    assert resolved.model_dir is not None
    runtimes = args.runtimes.split(",")
    if any(r.startswith("onnx") for r in runtimes):
        started = time.monotonic()
        export = [sys.executable, "-m", "workers.models.export", resolved.model_dir, "--int8"]
        subprocess.run(export, check=True, capture_output=True)
        print(f"export up to date ({time.monotonic() - started:.0f} s)")
    results: dict[str, dict[str, Any]] = {}
    for runtime in runtimes:
        command = [sys.executable, "-m", "bench.models.offline_onnx", "--child", runtime]
        command += ["--model-dir", resolved.model_dir, "--clips", str(args.clips)]
        command += ["--seconds", str(args.seconds), "--batches", args.batches]
        command += ["--threads", str(args.threads), "--repeat", str(args.repeat)]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        results[runtime] = json.loads(done.stdout.strip().splitlines()[-1])

    batches = args.batches.split(",")
    print(
        f"{args.model} (offline), {args.clips} clips of {args.seconds:g} s,"
        f" {args.threads} thread(s), {args.repeat} runs each"
    )
    print(
        "| runtime | "
        + " | ".join(f"batch {b}: ms/utt wall; CPU" for b in batches)
        + " | RSS loaded |"
        " RSS peak |"
    )
    print("|---|" + "---|" * len(batches) + "---|---|")
    for runtime, result in results.items():
        cells = []
        for batch in batches:
            median, low, high = result["ms"][batch]
            cells.append(f"{median:.0f} ({low:.0f}-{high:.0f}); CPU {result['cpu'][batch]:.0f}")
        print(
            f"| {runtime} | " + " | ".join(cells) + f" | {result['loaded_mb']:.0f} MB |"
            f" {result['peak_mb']:.0f} MB |"
        )
    texts = {runtime: result["texts"] for runtime, result in results.items()}
    if "pytorch" in texts and "onnx-fp32" in texts:
        same = sum(a == b for a, b in zip(texts["pytorch"], texts["onnx-fp32"], strict=True))
        print(f"onnx-fp32 text equals pytorch's for {same} of {len(texts['pytorch'])} utterances")
    if "onnx-fp32" in texts and "onnx-int8" in texts:
        ratio = difflib.SequenceMatcher(
            None, "".join(texts["onnx-fp32"]), "".join(texts["onnx-int8"])
        ).ratio()
        print(f"onnx-int8 against onnx-fp32: {ratio:.2f} similar")
    return 0


if __name__ == "__main__":
    sys.exit(main())
