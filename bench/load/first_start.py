"""What the README's serve command costs at its first start, and at the starts after it.

The gateway as the quick start serves it (``uvicorn gateway.app:app`` with the README's
variables, ``--env`` over them), on an empty model cache of its own (``ASR_MODEL_CACHE``, a
temporary directory): the first start builds the synthetic model, exports it to ONNX and
makes its workers' mapped copies (workers.engines.runtime.mapped_copy); each start is timed
from the process's launch to ``/readyz`` saying ready. Then ``--again`` more starts on the
cache the first one filled, and one real-time stream's chunk latency on the last.

    python -m bench.load.first_start
    python -m bench.load.first_start --env "ASR_ONNX_PRECISION=int8"
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from bench.common.gateway import served
from bench.common.report import header, row
from bench.load import ws_load

QUICK_START = {"ASR_MODEL": "synthetic:large", "ASR_RUNTIME": "onnx", "ASR_DEVICES": "cpu,cpu"}
FIRST_START_TIMEOUT_S = 900.0


def timed_start(env: dict[str, str], seconds: float) -> tuple[float, str]:
    """Seconds from launch to ready, and one stream's chunk p50 on it (ms, as text)."""
    started = time.monotonic()
    gateway = served(env, ready_timeout=FIRST_START_TIMEOUT_S)
    ready_s = time.monotonic() - started
    try:
        load_args = ws_load.parse_args(
            ["--url", gateway.url, "--streams", "1", "--seconds", str(seconds), "--quiet"]
        )
        summary, _ = ws_load.run(load_args)
        return ready_s, f"{summary.chunk_latency_ms.p50:.0f}"
    finally:
        gateway.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load.first_start")
    parser.add_argument("--env", default="", help="variables over the quick start's, ;-separated")
    parser.add_argument("--again", type=int, default=2, help="starts after the first")
    parser.add_argument("--seconds", type=float, default=6.0, help="the stream's audio")
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.env.split(";") if item)
    print(f"bench.load.first_start {vars(args)}")
    print("\n".join(header("start", "cache", "seconds to ready", "one stream's chunk p50 ms")))
    with tempfile.TemporaryDirectory(prefix="asr-first-start-") as cache:
        env = {**QUICK_START, **extra, "ASR_MODEL_CACHE": cache}
        for number in range(1 + args.again):
            ready_s, chunk_ms = timed_start(env, args.seconds)
            state = "empty" if number == 0 else "filled"
            print(row(number + 1, state, f"{ready_s:.1f}", chunk_ms), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
