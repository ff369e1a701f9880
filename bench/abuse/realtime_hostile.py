"""What a hostile realtime client costs the gateway and its other sessions.

Starts ``uvicorn gateway.app:app`` (checksum engine, ``bench.common.gateway.served``). ``--victims``
FunASR sessions stream 16 kHz audio in 100 ms frames, paced in real time, for
``--seconds``; a probe asks ``/healthz`` every 10 ms. After ``--calm`` seconds a second
process opens ``--sessions`` realtime sessions that each do one hostile thing
(``--scenario``) and then stay open until the end:

- ``update``: one ``session.update`` carrying ``--mib`` MiB of nested empty lists (in
  ``noise_reduction``, which an old dialect kept whole and echoed);
- ``append``: ``--appends`` appends of ``--append-seconds`` of audio each in ``--format``
  (``pcmu``: 8 kHz G.711, one byte a sample; ``pcm24``, ``pcm48``: PCM16 at 24 or 48 kHz).

Reported: the gateway process's RSS (VmRSS, sampled every 20 ms: its median before the
hostile sessions, its peak after they start, its median over the last second with them
still open; and VmHWM since they started), the victims' per-chunk latency (the last
byte of a 600 ms chunk sent -> its result) and the probe's latency (an event-loop stall
delays it by as much), each before and after the start; and what each hostile session
got (the answer to its update, its close code).

    python -m bench.abuse.realtime_hostile --scenario update --sessions 8 --mib 4
    python -m bench.abuse.realtime_hostile --scenario append --format pcmu --append-seconds 393
    python -m bench.abuse.realtime_hostile --scenario append --format pcm48 --append-seconds 32
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import os
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from bench.common.audio import checksum
from bench.common.gateway import Gateway, served
from bench.common.messages import END
from bench.common.procfs import peak_rss_kib, reset_peak_rss, rss_kib
from bench.common.stats import Distribution, distribution

REALTIME_PATH = "v1/realtime?intent=transcription"
FRAME_SAMPLES = 1600  # 100 ms at 16 kHz
FRAMES_PER_CHUNK = 6  # the config's 600 ms chunk
PROBE_INTERVAL_S = 0.01
RSS_INTERVAL_S = 0.02
FORMATS = {  # --format: the session's audio/input/format, bytes a second
    "pcmu": ({"type": "audio/pcmu"}, 8000),
    "pcm24": ({"type": "audio/pcm", "rate": 24000}, 48000),
    "pcm48": ({"type": "audio/pcm", "rate": 48000}, 96000),
}


@dataclass(slots=True)
class Samples:
    """What the main process saw, each with its time (``time.monotonic``)."""

    rss: list[tuple[float, int]] = field(default_factory=list)
    chunks: list[tuple[float, float]] = field(default_factory=list)  # (sent, latency)
    probes: list[tuple[float, float]] = field(default_factory=list)
    victims_verified: int = 0
    victims_failed: int = 0


@dataclass(frozen=True, slots=True)
class Report:
    scenario: str
    sessions: int
    rss_before_mib: float
    rss_peak_mib: float
    rss_end_mib: float
    hwm_mib: float
    chunk_before_ms: Distribution
    chunk_after_ms: Distribution
    probe_before_ms: Distribution
    probe_after_ms: Distribution
    victims_verified: int
    victims_failed: int
    hostile: list[dict[str, Any]]


# -- the hostile process -------------------------------------------------------------------


def hostile_update(mib: float) -> list[str]:
    lists = "[" + ",".join(["[]"] * int(mib * (1 << 20) / 3)) + "]"
    update = (
        '{"type": "session.update", "session": {"type": "transcription", "audio":'
        f' {{"input": {{"noise_reduction": {{"type": "near_field", "x": {lists}}}}}}}}}}}'
    )
    return [update]


def hostile_appends(fmt: str, seconds: float, appends: int) -> list[str]:
    audio_format, per_second = FORMATS[fmt]
    input_ = {"format": audio_format, "turn_detection": None}
    session = {"type": "transcription", "audio": {"input": input_}}
    events = [json.dumps({"type": "session.update", "session": session})]
    audio = os.urandom(int(seconds * per_second) // 2 * 2)  # noise, in any format
    append = {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()}
    return events + [json.dumps(append)] * appends


async def _hostile_session(url: str, events: list[str], until: float) -> dict[str, Any]:
    record: dict[str, Any] = {"answers": [], "close": None}
    try:
        async with connect(url, compression=None, proxy=None, max_size=None) as ws:
            json.loads(await ws.recv())  # session.created
            for event in events:
                sent = time.monotonic()
                await ws.send(event)
                if event.startswith('{"type": "session.update"'):
                    answer = json.loads(await asyncio.wait_for(ws.recv(), 60))
                    kind = answer["type"]
                    if kind == "error":
                        kind += ":" + answer["error"]["code"]
                    record["answers"].append((kind, round(time.monotonic() - sent, 3)))
            while (left := until - time.monotonic()) > 0:
                try:
                    await asyncio.wait_for(ws.recv(), left)
                except TimeoutError:
                    break
    except ConnectionClosed as closed:
        record["close"] = None if closed.rcvd is None else closed.rcvd.code
    return record


def _hostile_main(url: str, events: list[str], sessions: int, until: float, out: Any) -> None:
    async def run() -> list[dict[str, Any]]:
        return list(
            await asyncio.gather(*(_hostile_session(url, events, until) for _ in range(sessions)))
        )

    out.send(asyncio.run(run()))


# -- the main process: victims, probe, RSS ---------------------------------------------------


async def victim(url: str, seed: int, until: float, samples: Samples) -> None:
    pcm = zlib.crc32(seed.to_bytes(4, "little")).to_bytes(4, "little") * (FRAME_SAMPLES // 2)
    config = {"mode": "online", "chunk_size": [5, 10, 5], "chunk_interval": 10, "wav_name": "v"}
    sent_at: dict[int, float] = {}  # samples at a chunk's end -> when its last frame went
    sent = b""
    async with connect(url, compression=None, proxy=None, max_size=None) as ws:
        await ws.send(json.dumps({**config, "is_speaking": True}))

        async def read() -> str:
            text = ""
            async for message in ws:
                result = json.loads(message)
                text = result.get("text", "")
                samples_so_far = int(text.split(":")[0]) if ":" in text else -1
                if samples_so_far in sent_at and not result.get("is_final"):
                    at = sent_at.pop(samples_so_far)
                    samples.chunks.append((at, time.monotonic() - at))
                if result.get("is_final"):
                    return str(text)
            return text

        reader = asyncio.create_task(read())
        frames = 0
        start = time.monotonic()
        while time.monotonic() < until:
            await ws.send(pcm)
            sent += pcm
            frames += 1
            if frames % FRAMES_PER_CHUNK == 0:
                sent_at[len(sent) // 2] = time.monotonic()
            await asyncio.sleep(max(0.0, start + frames * 0.1 - time.monotonic()))
        await ws.send(END)
        final = await asyncio.wait_for(reader, 60)
    if final == checksum(sent):
        samples.victims_verified += 1
    else:
        samples.victims_failed += 1


async def probe(http: str, until: float, samples: Samples) -> None:
    async with httpx.AsyncClient(base_url=http, trust_env=False) as client:
        while time.monotonic() < until:
            at = time.monotonic()
            await client.get("/healthz")
            samples.probes.append((at, time.monotonic() - at))
            await asyncio.sleep(PROBE_INTERVAL_S)


async def rss_sampler(pid: int, until: float, samples: Samples) -> None:
    while time.monotonic() < until:
        samples.rss.append((time.monotonic(), rss_kib(pid) * 1024))
        await asyncio.sleep(RSS_INTERVAL_S)


async def measure(args: argparse.Namespace, gateway: Gateway, events: list[str]) -> Report:
    samples = Samples()
    ws_url = gateway.url
    start = time.monotonic()
    until = start + args.seconds
    hostile_at = start + args.calm
    tasks = [
        asyncio.create_task(victim(ws_url, seed, until, samples)) for seed in range(args.victims)
    ]
    tasks.append(asyncio.create_task(probe(gateway.http, until, samples)))
    tasks.append(asyncio.create_task(rss_sampler(gateway.pid, until, samples)))
    await asyncio.sleep(hostile_at - time.monotonic())
    reset_peak_rss(gateway.pid)
    receiver, sender = multiprocessing.get_context("spawn").Pipe(duplex=False)
    process = multiprocessing.get_context("spawn").Process(
        target=_hostile_main,
        args=(ws_url + REALTIME_PATH, events, args.sessions, until - 0.5, sender),
    )
    process.start()
    hostile: list[dict[str, Any]] = await asyncio.to_thread(receiver.recv)
    await asyncio.to_thread(process.join)
    hwm = peak_rss_kib(gateway.pid) * 1024
    await asyncio.gather(*tasks)

    def split(series: list[tuple[float, float]]) -> tuple[Distribution, Distribution]:
        before = [v * 1000 for t, v in series if start + 1 <= t < hostile_at]
        after = [v * 1000 for t, v in series if t >= hostile_at]
        return distribution(before), distribution(after)

    mib = 1 << 20
    before_rss = sorted(v for t, v in samples.rss if hostile_at - 1 <= t < hostile_at)
    end_rss = sorted(v for t, v in samples.rss if t >= until - 1.5)
    chunk_before, chunk_after = split(samples.chunks)
    probe_before, probe_after = split(samples.probes)
    return Report(
        args.scenario,
        args.sessions,
        before_rss[len(before_rss) // 2] / mib,
        max(v for t, v in samples.rss if t >= hostile_at) / mib,
        end_rss[len(end_rss) // 2] / mib,
        hwm / mib,
        chunk_before,
        chunk_after,
        probe_before,
        probe_after,
        samples.victims_verified,
        samples.victims_failed,
        hostile,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=("update", "append"), default="update")
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--mib", type=float, default=4.0)
    parser.add_argument("--format", choices=tuple(FORMATS), default="pcmu")
    parser.add_argument("--append-seconds", type=float, default=393.0)
    parser.add_argument("--appends", type=int, default=5)
    parser.add_argument("--victims", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=14.0)
    parser.add_argument("--calm", type=float, default=4.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.scenario == "update":
        events = hostile_update(args.mib)
    else:
        events = hostile_appends(args.format, args.append_seconds, args.appends)
    gateway = served({"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu"})
    try:
        report = asyncio.run(measure(args, gateway, events))
    finally:
        gateway.stop()
    print(
        f"{report.scenario} x{report.sessions}: gateway RSS {report.rss_before_mib:.0f} MiB"
        f" before, peak {report.rss_peak_mib:.0f} (VmHWM {report.hwm_mib:.0f}),"
        f" {report.rss_end_mib:.0f} at the end with the sessions open"
    )
    for name, before, after in (
        ("victims' chunk latency", report.chunk_before_ms, report.chunk_after_ms),
        ("/healthz probe", report.probe_before_ms, report.probe_after_ms),
    ):
        print(
            f"  {name}: before p50 {before.p50:.1f} p99 {before.p99:.1f} max {before.max:.1f}"
            f" ms; after p50 {after.p50:.1f} p99 {after.p99:.1f} max {after.max:.1f} ms"
        )
    print(f"  victims verified {report.victims_verified}, failed {report.victims_failed}")
    for each in report.hostile:
        print(f"  hostile: answers {each['answers']}, close {each['close']}")
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(report), indent=2))
    return 0 if report.victims_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
