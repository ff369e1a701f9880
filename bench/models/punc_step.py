"""What punctuating one offline result costs: funasr's PyTorch CT-Transformer against the
ONNX punctuator (``workers.engines.punctuation.ct_transformer``), per text and in memory.

Each runtime runs in a process of its own (as a worker would hold it), on ``--threads``
threads: it loads the model, punctuates ``--texts`` texts of each ``--chars`` length one
call each (ms per text: median and p90), then all of them in one call (what the offline
engine does with the finals of one step), and reports its resident memory after loading
and its peak. The parent checks that both runtimes wrote the same texts.

    python -m bench.models.punc_step --punc synthetic:large --texts 40 --chars 20 --chars 60

The ONNX export (``workers.models.export.punctuation``) is made first where it is not up to date,
in a process of its own, and its time reported.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import procfs
from shared.engines import Role
from workers.engines.runtime.onnx_files import punc_up_to_date
from workers.models.synthetic.base import LARGE_VOCAB, build_tokens

RUNTIMES = ("pytorch", "onnx")


def texts_of(chars: int, count: int) -> list[str]:
    """Random characters of the synthetic Paraformers' vocabulary (what they transcribe)."""
    characters = build_tokens(LARGE_VOCAB)[3:-1]
    rng = np.random.default_rng(chars)
    return ["".join(rng.choice(characters, chars)) for _ in range(count)]


def child(runtime: str, model_dir: str, threads: int, count: int, lengths: list[int]) -> None:
    """One runtime's measurements, as one JSON line on stdout."""
    from workers.engines.punctuation.ct_transformer import load_punctuator

    started = time.perf_counter()
    punctuator = load_punctuator(model_dir, "cpu", threads, onnx=runtime == "onnx")
    report: dict[str, object] = {
        "runtime": runtime,
        "load_s": time.perf_counter() - started,
        "rss_loaded_mib": procfs.rss_mib(),
        "torch_imported": "torch" in sys.modules,
    }
    digest = hashlib.sha256()
    for chars in lengths:
        texts = texts_of(chars, count)
        punctuator.punctuate(texts[:3])  # warm-up
        alone = []
        for text in texts:
            begun = time.perf_counter()
            (result,) = punctuator.punctuate([text])
            alone.append((time.perf_counter() - begun) * 1000)
            digest.update(result.text.encode())
            assert result.error is None, result.error
        begun = time.perf_counter()
        batched = punctuator.punctuate(texts)
        batched_ms = (time.perf_counter() - begun) * 1000 / count
        digest.update("".join(r.text for r in batched).encode())
        report[f"{chars}"] = {
            "median_ms": statistics.median(alone),
            "p90_ms": statistics.quantiles(alone, n=10)[-1],
            "batched_ms_per_text": batched_ms,
        }
    report["rss_peak_mib"] = procfs.peak_rss_mib()
    report["digest"] = digest.hexdigest()
    print(json.dumps(report))


def run_child(runtime: str, model_dir: str, args: argparse.Namespace) -> dict[str, object]:
    command = [
        sys.executable,
        "-m",
        "bench.models.punc_step",
        "--child",
        runtime,
        "--model-dir",
        model_dir,
    ]
    command += ["--threads", str(args.threads), "--texts", str(args.texts)]
    for chars in args.chars:
        command += ["--chars", str(chars)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{runtime} failed:\n{result.stderr[-3000:]}")
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models.punc_step", description=__doc__)
    parser.add_argument("--punc", default="synthetic:large", help="ASR_PUNC_MODEL's value")
    parser.add_argument("--texts", type=int, default=40, help="texts of each length")
    parser.add_argument("--chars", type=int, action="append", help="text lengths (20, 60)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", choices=RUNTIMES, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.chars = args.chars or [20, 60]
    if args.child is not None:
        child(args.child, args.model_dir, args.threads, args.texts, args.chars)
        return 0
    from shared.settings import PoolSettings
    from workers.models.resolve import resolve_model

    model_dir = resolve_model(args.punc, PoolSettings().model_cache_dir, Role.PUNCTUATION).model_dir
    assert model_dir is not None
    if not punc_up_to_date(Path(model_dir)):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "workers.models.export.punctuation", model_dir], check=True
        )
        print(f"export: {time.perf_counter() - started:.1f} s")
    reports = {runtime: run_child(runtime, model_dir, args) for runtime in RUNTIMES}
    print(f"\n{args.punc} ({model_dir}), {args.threads} thread(s), {args.texts} texts per length")
    print(
        "| runtime | " + " | ".join(f"{c} chars: ms/text (p90); batched" for c in args.chars) + " |"
    )
    print("|---|" + "---|" * len(args.chars))
    for runtime, report in reports.items():
        cells = []
        for chars in args.chars:
            numbers: dict[str, float] = report[f"{chars}"]  # type: ignore[assignment]
            cells.append(
                f"{numbers['median_ms']:.2f} ({numbers['p90_ms']:.2f});"
                f" {numbers['batched_ms_per_text']:.2f}"
            )
        print(f"| {runtime} | " + " | ".join(cells) + " |")
    print("\n| runtime | load s | RSS loaded MiB | RSS peak MiB | torch imported |")
    print("|---|---|---|---|---|")
    for runtime, report in reports.items():
        print(
            f"| {runtime} | {report['load_s']:.1f} | {report['rss_loaded_mib']:.0f}"
            f" | {report['rss_peak_mib']:.0f} | {report['torch_imported']} |"
        )
    same = reports["pytorch"]["digest"] == reports["onnx"]["digest"]
    print(f"\nsame texts from both runtimes: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
