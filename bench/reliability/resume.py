"""Resumable sessions under cuts: exactness, how long a resume takes, what parking costs
(RELIABILITY.md's "connection dropped mid-utterance" row).

- ``cuts``: ``--sessions`` resumable sessions at once (``gateway.client``, real time), each
  cut ``--cuts`` times at random byte offsets by the TCP proxy of the tests
  (``bench/common/cutting_proxy.py``), RST or FIN. Each transcript is checked against the
  checksum of exactly the audio sent and against an uncut run's results; the time from
  each cut to the resumed session frame (the client's backoff, its handshake and the
  session's answer) is measured.
- ``parked``: ``--parked`` sessions open an utterance, send 1.2 s of audio and drop their
  connection; the gateway process's RSS before and with them all parked.

    python -m bench.reliability.resume --sessions 20 --cuts 3 --seconds 6 --parked 64
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.client import connect

from bench.common.audio import checksum
from bench.common.cutting_proxy import CuttingProxy, cutting_proxy, random_cuts
from bench.common.gateway import Gateway, served
from bench.common.messages import config
from bench.common.procfs import rss_mib
from bench.common.stats import distribution
from gateway.client import Transcript, transcribe

RATE = 16_000
ENV = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_MAX_SESSIONS": "256"}


def _results(transcript: Transcript) -> list[tuple[object, object, object]]:
    return [(m.get("mode"), m.get("text"), m.get("is_final")) for m in transcript.messages]


async def _cut_sessions(port: int, args: argparse.Namespace) -> dict[str, Any]:
    recoveries: list[float] = []
    exact = 0
    resumes = 0

    async def one(index: int) -> None:
        nonlocal exact, resumes
        pcm = random.Random(index).randbytes(2 * RATE * args.seconds)
        async with cutting_proxy(port, []) as plain:
            uncut = await transcribe(plain.url, pcm, resumable=True, realtime=False)
        # Each connection is cut somewhere within the audio it would send in real time.
        audio_bytes = len(pcm)
        plan = random_cuts(
            index, args.cuts, up_range=(4_000, audio_bytes // args.cuts), how="either"
        )
        sessions: list[float] = []
        async with cutting_proxy(port, plan) as proxy:
            cut = await transcribe(
                proxy.url,
                pcm,
                resumable=True,
                on_session=lambda _frame: sessions.append(anyio.current_time()),
            )
            recoveries.extend(_recovery_times(proxy, sessions))
        resumes += cut.resumes
        if _results(cut) == _results(uncut) and cut.messages[-1]["text"] == checksum(pcm):
            exact += 1

    async with anyio.create_task_group() as group:
        for index in range(args.sessions):
            group.start_soon(one, index)
    return {
        "sessions": args.sessions,
        "exact": exact,
        "resumes": resumes,
        "cut_to_resumed_ms": asdict(distribution([1000 * r for r in recoveries])),
    }


def _recovery_times(proxy: CuttingProxy, session_frames: list[float]) -> list[float]:
    """For each cut, the time to the next session frame (the resumed connection's)."""
    times: list[float] = []
    for record in proxy.connections:
        if record.cut_at is None:
            continue
        later = [at for at in session_frames if at > record.cut_at]
        if later:
            times.append(min(later) - record.cut_at)
    return times


async def _parked(gateway: Gateway, count: int) -> dict[str, Any]:
    before = rss_mib(gateway.pid)
    url = gateway.url
    for _ in range(count):
        websocket = await connect(url, compression=None)
        await websocket.send(config(resumable=True))
        session: Mapping[str, Any] = json.loads(await websocket.recv())
        assert session["type"] == "session"
        await websocket.send(bytes(2 * RATE * 6 // 5))  # 1.2 s: two results
        received = 0
        while received < 2:
            if "result_id" in json.loads(await websocket.recv()):
                received += 1
        websocket.transport.abort()
    await anyio.sleep(1.0)
    with_parked = rss_mib(gateway.pid)
    return {
        "parked": count,
        "rss_before_mib": before,
        "rss_parked_mib": with_parked,
        "kib_per_parked_session": round(1024 * (with_parked - before) / count, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--cuts", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--parked", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args()
    env = {**ENV, "ASR_MAX_PARKED_SESSIONS": str(max(args.parked, args.sessions))}
    gateway = served(env)
    try:
        report = {
            "cuts": anyio.run(_cut_sessions, gateway.port, args),
            "parked": anyio.run(_parked, gateway, args.parked),
        }
    finally:
        gateway.stop()
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
