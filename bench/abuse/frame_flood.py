"""A flood of tiny frames against the gateway: how soon it is closed, what it costs the
server's event loop, and what a flood just under the cap does to other sessions.

Starts ``uvicorn gateway.app:app`` with the checksum engine twice: with the frame cap
(``ASR_MAX_FRAMES_PER_SECOND``, default 200) and without it (the cap set to 10^9, as the
gateway was before it). The flooding client runs in its own process, sending 2-byte binary
frames after a config.

- ``closed``: ``--floods`` floods one after another, unpaced, on the capped gateway: per
  flood, the frames the client got sent and the time from its first frame until it saw
  the close, and its close code; the server process's CPU over all of them.
- ``uncapped``: one unpaced flood for ``--seconds`` on the uncapped gateway: the frames a
  second it took and the server process's share of a core.
- ``latency``: ``--sessions`` sessions streaming in real time (60 ms frames, ``--utterance``
  seconds an utterance, one after another for ``--seconds``) report each utterance's final
  latency (end sent -> final result; every checksum verified), with no flood, with a flood
  paced at ``--under`` frames a second (just under the cap, so never closed), and on the
  uncapped gateway with an unpaced flood.

    python -m bench.abuse.frame_flood --floods 20 --sessions 10 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import sys
import time
from dataclasses import asdict, dataclass
from multiprocessing.process import BaseProcess
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from bench.common.audio import checksum
from bench.common.gateway import Gateway, served
from bench.common.messages import END
from bench.common.procfs import cpu_seconds
from bench.common.stats import distribution

FRAME = b"\x01\x02"
AUDIO_FRAME_BYTES = 1920  # 60 ms, FunASR's framing
CHUNK_BYTES = 19200  # the default config's 600 ms model chunk
CONFIG = json.dumps(
    {"mode": "online", "chunk_size": [5, 10, 5], "chunk_interval": 10, "wav_name": "flood"}
)


@dataclass(frozen=True, slots=True)
class Flood:
    sent: int
    seconds: float  # first frame -> the close seen (or the end of the flood)
    code: int | None  # the server's close code; None: it was never closed


async def _flood(url: str, rate: float, seconds: float) -> Flood:
    async with connect(url, compression=None, proxy=None, max_size=None) as ws:
        await ws.send(CONFIG)
        sent = 0
        start = time.perf_counter()
        try:
            while time.perf_counter() - start < seconds:
                await ws.send(FRAME)
                sent += 1
                if rate:
                    await asyncio.sleep(max(0.0, start + sent / rate - time.perf_counter()))
                elif sent % 64 == 0:
                    await asyncio.sleep(0)  # read too: the server's close ends the flood
        except ConnectionClosed:
            pass
        elapsed = time.perf_counter() - start
        if ws.close_code is None:
            return Flood(sent, elapsed, None)
        return Flood(sent, elapsed, ws.close_code)


def _flood_process(url: str, rate: float, seconds: float, out: Any) -> None:
    out.send(asdict(asyncio.run(_flood(url, rate, seconds))))


def run_flood(url: str, rate: float, seconds: float) -> tuple[BaseProcess, Any]:
    """A flood in its own process (so that it never competes with our sessions' loop)."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_flood_process, args=(url, rate, seconds, sender))
    process.start()
    return process, receiver


def flood_result(process: BaseProcess, receiver: Any) -> Flood:
    flood = Flood(**receiver.recv())
    process.join()
    return flood


async def _session(url: str, seconds: float, utterance_s: float, seed: int) -> list[float]:
    """Utterances in real time until ``seconds`` have passed; each one's final latency."""
    rng = random.Random(seed)
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    async with connect(url, compression=None, proxy=None, max_size=None) as ws:
        while time.perf_counter() < deadline:
            pcm = rng.randbytes(int(utterance_s * 32000) // 2 * 2)
            await ws.send(CONFIG)
            start = time.perf_counter()
            for index, offset in enumerate(range(0, len(pcm), AUDIO_FRAME_BYTES)):
                await asyncio.sleep(max(0.0, start + index * 0.06 - time.perf_counter()))
                await ws.send(pcm[offset : offset + AUDIO_FRAME_BYTES])
            await ws.send(END)
            ended = time.perf_counter()
            while True:
                message = json.loads(await ws.recv())
                if message.get("type") == "error":
                    raise RuntimeError(f"a good session was refused: {message}")
                if message["is_final"]:
                    break
            latencies.append((time.perf_counter() - ended) * 1000)
            expected = checksum(pcm)
            if message["text"] != expected:
                raise RuntimeError(f"a good session got {message['text']}, not {expected}")
    return latencies


async def _sessions(url: str, count: int, seconds: float, utterance_s: float) -> list[float]:
    results = await asyncio.gather(
        *(_session(url, seconds, utterance_s, seed) for seed in range(count))
    )
    return [latency for each in results for latency in each]


def latency_point(
    gateway: Gateway, name: str, flood_rate: float | None, args: argparse.Namespace
) -> dict[str, Any]:
    url = gateway.url
    flood = None
    if flood_rate is not None:
        flood = run_flood(url, flood_rate, args.seconds + 2 * args.utterance)
        time.sleep(0.5)  # flooding before the sessions start
    cpu_before, wall_before = cpu_seconds(gateway.pid), time.perf_counter()
    latencies = asyncio.run(_sessions(url, args.sessions, args.seconds, args.utterance))
    cpu = cpu_seconds(gateway.pid) - cpu_before
    wall = time.perf_counter() - wall_before
    flooded = flood_result(*flood) if flood is not None else None
    final = distribution(latencies)
    return {
        "point": name,
        "utterances": final.count,
        "final_p50_ms": round(final.p50, 1),
        "final_p95_ms": round(final.p95, 1),
        "final_max_ms": round(final.max, 1),
        "server_core_share": round(cpu / wall, 3),
        "flood": asdict(flooded) if flooded is not None else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.abuse.frame_flood",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--floods", type=int, default=20, help="closed floods in a row")
    parser.add_argument("--sessions", type=int, default=10, help="real-time sessions")
    parser.add_argument("--seconds", type=float, default=10.0, help="of sessions, per point")
    parser.add_argument("--utterance", type=float, default=2.0, help="seconds of audio each")
    parser.add_argument("--under", type=float, default=190.0, help="frames/s under the cap")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {"argv": sys.argv}
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_MAX_SESSIONS": "256"}
    capped = served(env)
    try:
        url = capped.url
        floods: list[Flood] = []
        cpu_before = cpu_seconds(capped.pid)
        for _ in range(args.floods):
            floods.append(flood_result(*run_flood(url, 0.0, 30.0)))
        cpu = cpu_seconds(capped.pid) - cpu_before
        report["closed"] = {
            "floods": len(floods),
            "codes": sorted({flood.code for flood in floods}, key=str),
            "frames_sent_median": sorted(f.sent for f in floods)[len(floods) // 2],
            "frames_sent_max": max(f.sent for f in floods),
            "ms_to_close_median": round(
                sorted(f.seconds for f in floods)[len(floods) // 2] * 1000, 1
            ),
            "ms_to_close_max": round(max(f.seconds for f in floods) * 1000, 1),
            "server_cpu_ms_per_flood": round(cpu * 1000 / len(floods), 1),
        }
        print(json.dumps(report["closed"]), file=sys.stderr)
        points = [
            latency_point(capped, "no flood", None, args),
            latency_point(capped, f"flood at {args.under:g}/s (capped gateway)", args.under, args),
        ]
    finally:
        capped.stop()
    uncapped = served({**env, "ASR_MAX_FRAMES_PER_SECOND": "1e9"})
    try:
        url = uncapped.url
        cpu_before, wall_before = cpu_seconds(uncapped.pid), time.perf_counter()
        flood = flood_result(*run_flood(url, 0.0, args.seconds))
        cpu = cpu_seconds(uncapped.pid) - cpu_before
        wall = time.perf_counter() - wall_before
        report["uncapped"] = {
            "frames_per_s": round(flood.sent / flood.seconds),
            "server_core_share": round(cpu / wall, 3),
            "code": flood.code,
        }
        print(json.dumps(report["uncapped"]), file=sys.stderr)
        points.append(latency_point(uncapped, "unpaced flood (no cap)", 0.0, args))
    finally:
        uncapped.stop()
    report["latency"] = points
    for point in points:
        print(json.dumps(point), file=sys.stderr)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
