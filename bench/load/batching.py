"""The worker's batch policy in time: how long a chunk waits when a step may be held open.

``tests/live/workers/test_batching.py`` checks what the policy decides (a step held for more
streams, never past the chunk deadline, never for a final chunk) with bounds that only
catch a hang; this measures how soon each answer comes. One checksum worker on the CPU (the
engine computes nothing: what is measured is the wait and the round trip), ``--repeat``
rounds of each case, a fresh stream each round:

- ``no wait``: a lone 600 ms chunk, ``ASR_BATCH_WAIT_MS`` 0.
- ``deadline``: a lone chunk, a 5 s wait and ``ASR_CHUNK_DEADLINE_MS`` 200: held to the
  deadline (less the last step's time), not for the wait.
- ``final``: a lone final chunk with a 5 s wait: never held.
- ``held for 4``: four streams' chunks with a 500 ms wait, sent one after another as the
  worker takes each (one slab slot): the first one's send -> result, and its batch size.

Per case: the time from the send to the result in the caller (p50 and max), and the
worker's own ``queue_ms`` (the chunk's send to its step's start).

    python -m bench.load.batching --repeat 20
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import anyio
import numpy as np

from bench.common.report import header
from bench.common.stats import distribution
from shared.settings import PoolSettings
from workers.pool import WorkerPool

CHUNK = np.arange(9600, dtype=np.int16)  # 600 ms at 16 kHz


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    batch_wait_s: float
    chunk_deadline_s: float
    final: bool = False
    streams: int = 1


CASES = (
    Case("no wait", 0.0, 0.6),
    Case("deadline", 5.0, 0.2),
    Case("final", 5.0, 10.0, final=True),
    Case("held for 4", 0.5, 5.0, streams=4),
)


@dataclass(frozen=True, slots=True)
class Row:
    case: Case
    seconds: list[float]
    queue_ms: list[float]
    batch_sizes: list[int]


async def one_round(pool: WorkerPool, case: Case) -> tuple[float, float, int]:
    """Send ``case``'s chunks; the first stream's send -> result, queue_ms, batch size."""
    streams = [pool.open_stream() for _ in range(case.streams)]
    try:
        with anyio.fail_after(30):
            started = time.perf_counter()
            for stream in streams:
                await (stream.finish(CHUNK) if case.final else stream.send(CHUNK))
            first = await streams[0].receive()
            seconds = time.perf_counter() - started
            for stream in streams[1:]:
                await stream.receive()
        return seconds, first.queue_ms, first.batch_size
    finally:
        for stream in streams:
            await stream.aclose()


async def measure(case: Case, repeat: int) -> Row:
    settings = PoolSettings(
        model="checksum",
        devices=("cpu",),
        batch_hold="wait",  # these cases are about the wait (workers.worker.batching)
        batch_wait_s=case.batch_wait_s,
        chunk_deadline_s=case.chunk_deadline_s,
        slots_per_worker=1 if case.streams > 1 else PoolSettings().slots_per_worker,
    )
    async with WorkerPool(settings) as pool:
        await one_round(pool, case)  # warm-up: the first step's time feeds the deadline
        rounds = [await one_round(pool, case) for _ in range(repeat)]
    return Row(
        case,
        [seconds for seconds, _, _ in rounds],
        [queue_ms for _, queue_ms, _ in rounds],
        [size for _, _, size in rounds],
    )


def markdown(rows: list[Row]) -> str:
    lines = [
        *header(
            "case",
            "wait / deadline",
            "send -> result p50 / max",
            "worker queue_ms p50 / max",
            "batch size",
        ),
    ]
    for row in rows:
        case = row.case
        seconds, queued = distribution(row.seconds), distribution(row.queue_ms)
        sizes = sorted(set(row.batch_sizes))
        lines.append(
            f"| {case.name} | {case.batch_wait_s * 1000:.0f} / {case.chunk_deadline_s * 1000:.0f}"
            f" ms | {seconds.p50 * 1000:.1f} / {seconds.max * 1000:.1f} ms"
            f" | {queued.p50:.1f} / {queued.max:.1f} | {', '.join(map(str, sizes))} |"
        )
    return "\n".join(lines)


async def run(repeat: int) -> list[Row]:
    return [await measure(case, repeat) for case in CASES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="rounds per case")
    args = parser.parse_args(argv)
    print(markdown(anyio.run(run, args.repeat)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
