"""What offline sessions that never end cost the gateway, with and without the budget.

Starts ``uvicorn gateway.app:app`` (checksum engine), opens ``--sessions`` offline
sessions at once, each sending ``--seconds`` of audio as fast as it can and never its end,
and reports how many held all their audio, how many were closed (and with which code), and
the gateway process's RSS before and at the peak::

    python -m bench.abuse.held_audio --sessions 8 --seconds 1800 --budget 3600
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter

import websockets

from bench.common.gateway import served
from bench.common.procfs import rss_mib

FRAME_BYTES = 64000  # 2 s of 16 kHz int16 per frame


async def hold(
    url: str, seconds: float, outcomes: Counter[str], all_settled: asyncio.Event, sessions: int
) -> None:
    frame = bytes(range(256)) * (FRAME_BYTES // 256)
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"mode": "offline", "wav_name": "held", "is_speaking": True}))
        try:
            for _ in range(int(seconds * 32000) // FRAME_BYTES):
                await ws.send(frame)
            await ws.send(json.dumps({"wav_name": "held"}))  # nothing owed: no answer
            await asyncio.sleep(2.0)  # a round trip's worth: the server has read it all
            outcome = "held"
        except websockets.ConnectionClosed as closed:
            outcome = f"closed {closed.rcvd.code if closed.rcvd else 'none'}"
        outcomes[outcome] += 1
        if sum(outcomes.values()) == sessions:
            all_settled.set()
        await asyncio.sleep(3600)  # keep holding until the peak is measured


async def measure(args: argparse.Namespace) -> None:
    env = {"ASR_MODEL": "checksum", "ASR_MAX_SESSION_SECONDS": str(args.seconds + 60)}
    if args.budget is not None:
        env["ASR_MAX_BUFFERED_SECONDS"] = str(args.budget)
    gateway = served(env)
    try:
        url = gateway.url
        before = rss_mib(gateway.pid)
        outcomes: Counter[str] = Counter()
        settled = asyncio.Event()
        tasks = [
            asyncio.create_task(hold(url, args.seconds, outcomes, settled, args.sessions))
            for _ in range(args.sessions)
        ]
        started = time.perf_counter()
        await settled.wait()
        peak = rss_mib(gateway.pid)
        seconds = time.perf_counter() - started
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        budget = "default" if args.budget is None else f"{args.budget:g} s"
        print(
            f"{args.sessions} offline sessions x {args.seconds:g} s, budget {budget}:"
            f" {dict(sorted(outcomes.items()))} in {seconds:.1f} s;"
            f" gateway RSS {before:.0f} -> {peak:.0f} MiB"
        )
    finally:
        gateway.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1800.0)
    parser.add_argument("--budget", type=float, default=None, help="ASR_MAX_BUFFERED_SECONDS")
    asyncio.run(measure(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
