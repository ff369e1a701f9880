"""Transport micro-benchmark: the pool with the checksum engine, shm against queue.

No gateway, no model: S streams each send 600 ms int16 chunks (19,200 bytes) at a fixed
interval through ``WorkerPool`` and wait for each chunk's result. Reported per transport:
CPU per chunk (the parent process, all its threads, and the workers, from /proc) and the
send-to-result latency of each chunk (p50/p95/p99). Every final checksum is verified.

    python -m bench.load.transport --streams 50 --chunks 40 --interval 0.1 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import anyio
import numpy as np

from bench.common.audio import expected_checksum
from bench.common.procfs import cpu_seconds, own_cpu_seconds
from bench.common.report import header
from shared.settings import PoolSettings, Transport
from workers.pool import WorkerPool

CHUNK_SAMPLES = 9600  # 600 ms at 16 kHz


@dataclass(frozen=True, slots=True)
class TransportRun:
    transport: str
    chunks: int
    parent_cpu_us_per_chunk: float
    workers_cpu_us_per_chunk: float
    total_cpu_us_per_chunk: float
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    wall_s: float


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


async def _one_stream(
    pool: WorkerPool, index: int, chunks: int, interval: float, latencies: list[float]
) -> None:
    rng = np.random.default_rng(index)
    audio = rng.integers(-32768, 32767, size=CHUNK_SAMPLES * chunks, dtype=np.int16)
    async with pool.open_stream() as stream:
        next_send = time.perf_counter() + rng.uniform(0, interval)  # spread the streams
        for i in range(chunks):
            await anyio.sleep(max(0.0, next_send - time.perf_counter()))
            next_send += interval
            chunk = audio[i * CHUNK_SAMPLES : (i + 1) * CHUNK_SAMPLES]
            sent = time.perf_counter()
            if i == chunks - 1:
                await stream.finish(chunk)
            else:
                await stream.send(chunk)
            result = await stream.receive()
            latencies.append(time.perf_counter() - sent)
        expected = expected_checksum(audio)
        if not result.is_final or result.text != expected:
            raise AssertionError(f"stream {index}: {result.text} != {expected}")


async def run_transport(
    transport: Transport, streams: int, chunks: int, interval: float, workers: int
) -> TransportRun:
    settings = PoolSettings(model="checksum", devices=("cpu",) * workers, transport=transport)
    async with WorkerPool(settings) as pool:
        pids = [w.pid for w in pool.status() if w.pid is not None]
        # Warm up: the first chunks pay for imports and page faults.
        await pool.transcribe(np.zeros(CHUNK_SAMPLES * 4, dtype=np.int16))
        latencies: list[float] = []
        parent_before = own_cpu_seconds()
        workers_before = sum(cpu_seconds(pid) for pid in pids)
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for index in range(streams):
                group.start_soon(_one_stream, pool, index, chunks, interval, latencies)
        wall = time.perf_counter() - started
        parent_cpu = own_cpu_seconds() - parent_before
        workers_cpu = sum(cpu_seconds(pid) for pid in pids) - workers_before
    total_chunks = streams * chunks
    return TransportRun(
        transport=transport,
        chunks=total_chunks,
        parent_cpu_us_per_chunk=parent_cpu / total_chunks * 1e6,
        workers_cpu_us_per_chunk=workers_cpu / total_chunks * 1e6,
        total_cpu_us_per_chunk=(parent_cpu + workers_cpu) / total_chunks * 1e6,
        latency_p50_ms=percentile(latencies, 50) * 1e3,
        latency_p95_ms=percentile(latencies, 95) * 1e3,
        latency_p99_ms=percentile(latencies, 99) * 1e3,
        wall_s=wall,
    )


def summarize(runs: list[TransportRun]) -> str:
    lines = [
        *header(
            "transport",
            "runs",
            "total CPU µs/chunk (median, min-max)",
            "parent µs",
            "workers µs",
            "p50 ms",
            "p99 ms (median, min-max)",
        ),
    ]
    for transport in ("shm", "queue"):
        mine = [r for r in runs if r.transport == transport]
        if not mine:
            continue
        total = [r.total_cpu_us_per_chunk for r in mine]
        p99 = [r.latency_p99_ms for r in mine]
        lines.append(
            f"| {transport} | {len(mine)} | {statistics.median(total):.0f}"
            f" ({min(total):.0f}-{max(total):.0f})"
            f" | {statistics.median(r.parent_cpu_us_per_chunk for r in mine):.0f}"
            f" | {statistics.median(r.workers_cpu_us_per_chunk for r in mine):.0f}"
            f" | {statistics.median(r.latency_p50_ms for r in mine):.2f}"
            f" | {statistics.median(p99):.2f} ({min(p99):.2f}-{max(p99):.2f}) |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> list[TransportRun]:
    runs: list[TransportRun] = []
    for repeat in range(args.repeat):
        # Alternate the order so that neither transport always runs on a warmer machine.
        order: list[Transport] = ["shm", "queue"] if repeat % 2 == 0 else ["queue", "shm"]
        for transport in order:
            run = await run_transport(
                transport, args.streams, args.chunks, args.interval, args.workers
            )
            print(json.dumps(asdict(run)), file=sys.stderr)
            runs.append(run)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load.transport", description=__doc__)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=40, help="chunks per stream")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between chunks")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args(argv)
    runs = anyio.run(main_async, args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    print(summarize(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
