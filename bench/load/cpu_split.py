"""Where the CPU goes at one load point: the gateway's own process (its event loop), each
pool's workers, and the load generator, in cores over the run (from /proc).

    E="ASR_MODEL=synthetic:large;ASR_DEVICES=cpu,cpu;ASR_ENGINE=paraformer-onnx"
    E="$E;ASR_ONNX_PRECISION=int8"
    python -m bench.load.cpu_split --env "$E" --streams 24,32
    C="ASR_OFFLINE_MODEL=synthetic:large;ASR_VAD_MODEL=synthetic:large"
    python -m bench.load.cpu_split --mode 2pass --streams 12 \\
        --env "$E;$C;ASR_PUNC_MODEL=synthetic:large"

The workers are told apart by the pids ``/readyz`` lists for each pool. Per point it also
gives each streaming worker's CPU per chunk answered, beside the mean batch those chunks
were decoded in: the figure to set against ``bench.models.raw_ceiling``'s "ms per
stream-chunk" at that batch.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.common import ROOT, procfs
from bench.common.gateway import Gateway, served
from bench.common.report import header
from bench.load import ws_load

POOLS = ("workers", "offline_workers", "vad_workers", "speaker_workers")


def worker_pids(gateway: Gateway) -> dict[int, str]:
    """Each worker's pid, and its pool's name as ``/readyz`` gives it."""
    body = gateway.readyz()
    return {int(w["pid"]): pool for pool in POOLS for w in body.get(pool, []) if w["pid"]}


def measure(gateway: Gateway, streams: int, args: argparse.Namespace) -> list[str]:
    url, gateway_pid, pids = gateway.url, gateway.pid, worker_pids(gateway)
    before = {pid: procfs.cpu_seconds(pid) for pid in [gateway_pid, *pids]}
    client_before, started = procfs.own_cpu_seconds(), time.perf_counter()
    load = ["--url", url, "--mode", args.mode, "--streams", str(streams), "--quiet"]
    load += ["--seconds", str(args.seconds), "--ramp", str(args.ramp)]
    summary, records = ws_load.run(ws_load.parse_args(load))
    wall = time.perf_counter() - started
    used = {pid: procfs.cpu_seconds(pid) - cpu for pid, cpu in before.items()}
    client = procfs.own_cpu_seconds() - client_before
    chunks = [b for r in records for b in r.batch_sizes]
    streaming = [pid for pid, pool in pids.items() if pool == "workers"]
    per_chunk = sum(used[pid] for pid in streaming) / len(chunks) * 1000 if chunks else 0.0
    by_pool = {
        pool: ", ".join(f"{used[pid] / wall:.2f}" for pid, name in pids.items() if name == pool)
        for pool in POOLS
    }
    total = (sum(used.values()) + client) / wall
    return [
        f"| {args.mode} | {streams} | {summary.chunk_latency_ms.p50:.0f}"
        f" | {summary.chunk_latency_ms.p95:.0f} | {summary.final_latency_ms.p95:.0f}"
        f" | {used[gateway_pid] / wall:.2f} | {by_pool['workers']} | {by_pool['offline_workers']}"
        f" | {by_pool['vad_workers']} | {client / wall:.2f} | {total:.2f}"
        f" | {sum(chunks) / len(chunks) if chunks else float('nan'):.1f} | {per_chunk:.1f} |"
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load.cpu_split",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--env", required=True, help="the gateway's ASR_* variables, ';'-separated")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="serve from this tree")
    parser.add_argument("--mode", choices=["online", "2pass"], default="online")
    parser.add_argument("--streams", default="24")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--ramp", type=float, default=0.6)
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env.split(";") if item)
    lines = header(
        "mode",
        "streams",
        "p50 chunk ms",
        "p95 chunk ms",
        "final p95 ms",
        "gateway (cores)",
        "streaming workers",
        "offline workers",
        "VAD worker",
        "load generator",
        "all",
        "mean batch",
        "streaming CPU ms per chunk",
    )
    gateway = served(env, cwd=args.checkout)
    try:
        for streams in (int(s) for s in args.streams.split(",")):
            lines += measure(gateway, streams, args)
            print(lines[-1], file=sys.stderr, flush=True)
    finally:
        gateway.stop()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
