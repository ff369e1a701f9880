"""What the whole gateway holds, process by process, at 1, 2 and 4 workers of one model,
with the workers' ONNX weights mapped from one shared file (``ASR_ONNX_MAPPED_WEIGHTS``, the
default) and without.

For each worker count and each way: the gateway (``uvicorn gateway.app:app``) with ``--env``
and ``ASR_DEVICES`` naming that many CPU workers; ``--streams`` real-time streams of
``--seconds`` of audio through it (so every worker has run steps of several batch sizes and
its heap holds what serving needs); then each process's RSS and PSS
(``/proc/PID/smaps_rollup``). PSS splits each shared page among the processes that map it,
so the PSS column adds up to what the server holds; RSS counts a shared page once in every
process. The mapped copies are made before the first point (the first start makes them).

    E="ASR_MODEL=synthetic:large;ASR_ENGINE=paraformer-onnx;ASR_ONNX_PRECISION=int8"
    python -m bench.load.server_memory --env "$E" --workers 1,2,4
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from bench.common import procfs
from bench.common.report import header, row
from bench.load import ws_load
from bench.load.sweep import Config, start_gateway


@dataclass(frozen=True, slots=True)
class Held:
    """One process's memory in MiB."""

    role: str
    rss: float
    pss: float


def measure(env: dict[str, str], streams: int, seconds: float) -> list[Held]:
    gateway = start_gateway(Config("memory", env))
    try:
        load_args = ws_load.parse_args(
            ["--url", gateway.url, "--streams", str(streams), "--seconds", str(seconds), "--quiet"]
        )
        summary, _ = ws_load.run(load_args)
        if summary.errors:
            raise SystemExit(f"{summary.errors} streams failed: the figures would not hold")
        held = [Held("gateway", procfs.rss_mib(gateway.pid), procfs.pss_mib(gateway.pid))]
        held += [
            Held(f"worker {n}", procfs.rss_mib(pid), procfs.pss_mib(pid))
            for n, pid in enumerate(procfs.workers(gateway.pid))
        ]
        return held
    finally:
        gateway.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load.server_memory")
    parser.add_argument("--env", default="", help="the gateway's variables, ;-separated")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    base = dict(item.split("=", 1) for item in args.env.split(";") if item)
    print(f"bench.load.server_memory {vars(args)}")
    print(
        "\n".join(header("workers", "weights", "gateway RSS / PSS MiB", "each worker", "all PSS"))
    )
    for count in (int(n) for n in args.workers.split(",")):
        for mapped in ("1", "0"):
            env = {
                **base,
                "ASR_DEVICES": ",".join(["cpu"] * count),
                "ASR_ONNX_MAPPED_WEIGHTS": mapped,
            }
            held = measure(env, args.streams, args.seconds)
            gateway, workers = held[0], held[1:]
            each = ", ".join(f"{w.rss:.0f} / {w.pss:.0f}" for w in workers)
            way = "mapped" if mapped == "1" else "own copy"
            total = sum(h.pss for h in held)
            print(
                row(count, way, f"{gateway.rss:.0f} / {gateway.pss:.0f}", each, f"{total:.0f}"),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
