"""How soon a fault is seen, and what the server holds meanwhile (RELIABILITY.md's rows).

``tests/live/gateway/test_faults.py`` and ``tests/live/workers/test_pool_lifecycle.py`` check what
each fault does, with bounds that only catch a hang; this measures how soon. The gateway
is ``uvicorn gateway.app:app`` with the checksum engine (``bench.common.gateway.served``).

- ``sigkill``: two workers; each round, ``--sessions`` sessions open one by one (the
  least-loaded worker alternates), each sends a config and a 600 ms chunk and reads its
  result, which names the worker; worker 0 is SIGKILLed, then each session sends the rest of
  its audio and its end. The time from the kill to each of worker 0's sessions' error frame;
  then the replacement is waited for.
- ``hang``: the same with SIGSTOP and ``ASR_WORKER_STEP_TIMEOUT`` 1 s: the watchdog kills
  the worker once it has owed results for its hang timeout, 1.6 s here (the step timeout +
  the 600 ms chunk it owed when it began to owe), at its next tick (every 0.25 s).
- ``pool hang``: ``WorkerPool`` alone, as the pool's test: a step timeout of 1 s, one
  stream answered, the worker stopped, then 5,000 samples (0.312 s) sent: send -> the
  stream's ``WorkerError``; the timeout is 1.312 s.
- ``refused``: ``ASR_MAX_SESSIONS`` 32 and 64 clients at once: each refused client's
  connect -> its error frame (1013), while the 32 admitted sessions are held open; and the
  server process's RSS before and at that peak (the admitted ones then finish).

    python -m bench.reliability.faults --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import time
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from bench.common import procfs
from bench.common.gateway import Gateway, served
from bench.common.messages import END
from bench.common.procfs import rss_mib
from bench.common.report import header
from bench.common.stats import distribution
from shared.errors import WorkerError
from shared.settings import PoolSettings
from workers.pool import WorkerPool

CHUNK = 19200  # bytes: one 600 ms chunk of the config below
CONFIG = json.dumps({"mode": "online", "chunk_size": [5, 10, 5], "wav_name": "fault"})
STEP_TIMEOUT_S = 1.0
PLACES = 32  # ASR_MAX_SESSIONS of the overload case


@dataclass(frozen=True, slots=True)
class Row:
    case: str
    values: list[float]  # seconds
    note: str = ""


def session(url: str) -> connect:
    return connect(
        url, subprotocols=[Subprotocol("binary")], compression=None, max_size=None, proxy=None
    )


async def error_seen(ws: ClientConnection) -> float | None:
    """Read until our error frame (or the close): when; None if the final came."""
    try:
        while True:
            message = json.loads(await ws.recv())
            if message.get("type") == "error":
                return time.perf_counter()
            if message.get("is_final"):
                return None
    except ConnectionClosed:
        return time.perf_counter()


async def through_a_fault(
    url: str, index: int, started: anyio.Event, struck: anyio.Event, seen: dict[int, Any]
) -> None:
    pcm = random.Random(index).randbytes(CHUNK * 4)
    async with session(url) as ws:
        await ws.send(CONFIG)
        await ws.send(pcm[:CHUNK])
        worker = json.loads(await ws.recv())["worker"]
        started.set()
        await struck.wait()
        try:
            for offset in range(CHUNK, len(pcm), CHUNK):
                await ws.send(pcm[offset : offset + CHUNK])
            await ws.send(END)
        except ConnectionClosed:
            pass
        seen[index] = (worker, await error_seen(ws))


async def wait_replaced(gateway: Gateway, restarts: int) -> None:
    with anyio.fail_after(60):
        while True:
            status = await anyio.to_thread.run_sync(gateway.readyz)
            workers = status["workers"]
            if (
                status["sessions"]["active"] == 0
                and all(w["state"] == "ready" for w in workers)
                and workers[0]["restarts"] == restarts
            ):
                return
            await anyio.sleep(0.2)


async def worker_lost(fault: str, rounds: int, sessions: int) -> Row:
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu"}
    if fault == "hang":
        env["ASR_WORKER_STEP_TIMEOUT"] = f"{STEP_TIMEOUT_S:g}"
    gateway = await anyio.to_thread.run_sync(served, env)
    url = gateway.url
    seconds: list[float] = []
    try:
        for round_ in range(1, rounds + 1):
            victim = (await anyio.to_thread.run_sync(gateway.readyz))["workers"][0]
            seen: dict[int, Any] = {}
            struck = anyio.Event()
            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    for index in range(sessions):
                        started = anyio.Event()
                        group.start_soon(through_a_fault, url, index, started, struck, seen)
                        await started.wait()
                    struck_at = time.perf_counter()
                    kill = signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP
                    os.kill(victim["pid"], kill)
                    struck.set()
            for worker, at in seen.values():
                if worker == victim["index"]:
                    assert at is not None, "a session of the lost worker got its final"
                    seconds.append(at - struck_at)
            await wait_replaced(gateway, round_)
    finally:
        await anyio.to_thread.run_sync(gateway.stop)
    note = "SIGKILL" if fault == "sigkill" else f"SIGSTOP, step timeout {STEP_TIMEOUT_S:g} s"
    return Row(fault, seconds, f"{note}; fault -> error frame")


def _stopped(pid: int) -> bool:
    return procfs.state(pid) == "T"


async def pool_hang(rounds: int) -> Row:
    settings = PoolSettings(model="checksum", devices=("cpu",), step_timeout_s=STEP_TIMEOUT_S)
    audio = np.arange(5000, dtype=np.int16)
    seconds: list[float] = []
    async with WorkerPool(settings) as pool:
        for _ in range(rounds):
            with anyio.fail_after(30):
                await pool.wait_ready()
                (worker,) = pool.status()
                assert worker.pid is not None
                async with pool.open_stream() as stream:
                    await stream.send(audio)
                    await stream.receive()
                    os.kill(worker.pid, signal.SIGSTOP)
                    while not _stopped(worker.pid):  # noqa: ASYNC110 (another process)
                        await anyio.sleep(0.001)
                    started = time.perf_counter()
                    await stream.send(audio)
                    try:
                        await stream.receive()
                    except WorkerError:
                        seconds.append(time.perf_counter() - started)
                    else:
                        raise AssertionError("a stopped worker answered")
    return Row("pool hang", seconds, "send to a stopped worker -> WorkerError; timeout 1.312 s")


async def admitted_or_refused(
    url: str, index: int, hold: anyio.Event, refused: list[float], all_refused: anyio.Event
) -> None:
    pcm = random.Random(index).randbytes(CHUNK * 2)
    connected = time.perf_counter()
    async with session(url) as ws:
        try:
            await ws.send(CONFIG)
            await ws.send(pcm[:CHUNK])
        except ConnectionClosed:
            pass  # refused before we could send: the error frame is there to read
        first = json.loads(await ws.recv())
        if first.get("type") == "error":
            refused.append(time.perf_counter() - connected)
            if len(refused) >= PLACES:
                all_refused.set()
            return
        await hold.wait()
        await ws.send(pcm[CHUNK:])
        await ws.send(END)
        assert await error_seen(ws) is None, "an admitted session failed"


async def twice_the_places() -> tuple[Row, str]:
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu", "ASR_MAX_SESSIONS": str(PLACES)}
    gateway = await anyio.to_thread.run_sync(served, env)
    url = gateway.url
    refused: list[float] = []
    try:
        before = rss_mib(gateway.pid)
        hold, all_refused = anyio.Event(), anyio.Event()
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                for index in range(2 * PLACES):
                    group.start_soon(admitted_or_refused, url, index, hold, refused, all_refused)
                await all_refused.wait()
                peak = rss_mib(gateway.pid)
                hold.set()
    finally:
        await anyio.to_thread.run_sync(gateway.stop)
    rss = f"server RSS {before:.0f} -> {peak:.0f} MiB at the peak (+{peak - before:.1f})"
    return Row("refused", refused, f"{2 * PLACES} clients, {PLACES} places: connect -> 1013"), rss


def markdown(rows: list[Row]) -> str:
    lines = header("case", "n", "p50", "max", "what")
    for row in rows:
        d = distribution(row.values)
        lines.append(
            f"| {row.case} | {d.count} | {d.p50 * 1000:.0f} ms | {d.max * 1000:.0f} ms"
            f" | {row.note} |"
        )
    return "\n".join(lines)


async def run(rounds: int, sessions: int) -> str:
    rows = [
        await worker_lost("sigkill", rounds, sessions),
        await worker_lost("hang", rounds, sessions),
        await pool_hang(rounds),
    ]
    refused, rss = await twice_the_places()
    return f"{markdown([*rows, refused])}\n\n{rss}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="faults per case")
    parser.add_argument("--sessions", type=int, default=6, help="sessions per fault round")
    args = parser.parse_args(argv)
    print(anyio.run(run, args.rounds, args.sessions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
