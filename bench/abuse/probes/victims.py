"""Honest real-time sessions beside a probe, in a process of their own (so that neither the
attacker's event loop nor the sampler's thread delays them).

Each victim streams utterances of ``UTTERANCE_S`` in real time, in 60 ms frames, in the
README's default online config with ``"timing": true`` (a result for every 600 ms chunk,
numbered by ``seq``). A chunk's latency is from just before the send of its last frame to
its result; each utterance's final checksum is verified. Victims connect from
``VICTIM_ADDRESS``, so that no per-address limit counts them with the attacker. A session
closed at ASR_MAX_SESSION_SECONDS reconnects (counted as renewed); anything else that goes
wrong for a victim is a failure, reported with its reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import random
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bench.abuse.probes.clients import FRAME_60MS, config
from bench.abuse.probes.model import Victims
from bench.common.audio import checksum
from bench.common.messages import END

UTTERANCE_S = 3.0
FRAMES_PER_CHUNK = 10  # 60 ms frames in the config's 600 ms chunk
READY_TIMEOUT_S = 60.0


class _Refused(Exception):
    """Our error frame came: the session is over."""


@dataclass
class _Record:
    chunks: list[tuple[float, float]] = field(default_factory=list)  # (sent at, latency s)
    utterances: int = 0
    verified: int = 0
    renewed: int = 0
    failures: list[str] = field(default_factory=list)


async def _utterance(ws: ClientConnection, rng: random.Random, name: str, record: _Record) -> None:
    pcm = rng.randbytes(int(UTTERANCE_S * 32000) // FRAME_60MS * FRAME_60MS)
    sent_at: dict[int, float] = {}

    async def results() -> str:
        while True:
            message = json.loads(await ws.recv())
            if message.get("type") == "error":
                raise _Refused(f"{message.get('code')}: {str(message.get('message'))[:80]}")
            seq = message.get("seq")
            if not message["is_final"] and isinstance(seq, int) and seq in sent_at:
                record.chunks.append((sent_at[seq], time.monotonic() - sent_at[seq]))
            if message["is_final"]:
                return str(message["text"])

    async def audio() -> None:
        start = time.monotonic()
        for index, offset in enumerate(range(0, len(pcm), FRAME_60MS)):
            await asyncio.sleep(max(0.0, start + index * 0.06 - time.monotonic()))
            if (index + 1) % FRAMES_PER_CHUNK == 0:
                sent_at[index // FRAMES_PER_CHUNK] = time.monotonic()
            await ws.send(pcm[offset : offset + FRAME_60MS])
        await ws.send(END)

    await ws.send(config(wav_name=name, timing=True))
    async with asyncio.TaskGroup() as group:
        reader = group.create_task(results())
        group.create_task(audio())
    record.utterances += 1
    expected = checksum(pcm)
    if reader.result() == expected:
        record.verified += 1
    else:
        record.failures.append(f"checksum {reader.result()} != {expected}")


async def _victim(
    index: int, url: str, source: str, stop: EventType, ready: asyncio.Event, record: _Record
) -> None:
    rng = random.Random(index)
    while not stop.is_set():
        ws: ClientConnection | None = None
        try:
            async with connect(
                url, compression=None, max_size=None, proxy=None, local_addr=(source, 0)
            ) as ws:
                while not stop.is_set():
                    await _utterance(ws, rng, f"victim-{index}", record)
                    ready.set()
        except* (_Refused, ConnectionClosed):
            reason = ""
            if ws is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ws.wait_closed(), 5)
                reason = ws.close_reason or ""
            if ws is not None and ws.close_code == 1008 and "ASR_MAX_SESSION_SECONDS" in reason:
                record.renewed += 1  # ASR_MAX_SESSION_SECONDS: a long session reconnects
            else:
                code = ws.close_code if ws is not None else None
                record.failures.append(f"closed {code}: {reason[:80]}")
                await asyncio.sleep(0.2)  # a refused victim comes back, as a client would
        except* OSError as group:
            record.failures.append(f"{group.exceptions[0]!r}"[:120])
            await asyncio.sleep(0.2)


async def _run(url: str, count: int, source: str, stop: EventType, out: Connection) -> None:
    record = _Record()
    readies = [asyncio.Event() for _ in range(count)]
    async with asyncio.TaskGroup() as group:
        for index in range(count):
            group.create_task(_victim(index, url, source, stop, readies[index], record))
        try:
            await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), READY_TIMEOUT_S)
            out.send("ready")
        except TimeoutError:
            out.send("not ready")
            stop.set()
    out.send(
        {
            "chunks": record.chunks,
            "utterances": record.utterances,
            "verified": record.verified,
            "renewed": record.renewed,
            "failures": record.failures,
        }
    )


def _main(url: str, count: int, source: str, stop: EventType, out: Connection) -> None:
    asyncio.run(_run(url, count, source, stop, out))


class VictimSessions:
    """``count`` victims in a process; ``start`` returns once each has finished an
    utterance, ``finish`` stops them and reports what happened within ``window``."""

    def __init__(self, url: str, count: int, source: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._receiver, sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_main, args=(url, count, source, self._stop, sender), daemon=True
        )

    def start(self) -> None:
        self._process.start()
        if not self._receiver.poll(READY_TIMEOUT_S + 10) or self._receiver.recv() != "ready":
            self._stop.set()
            raise SystemExit("the victims could not start a session each")

    def finish(self, window: tuple[float, float]) -> Victims:
        self._stop.set()
        data: dict[str, Any] = self._receiver.recv()
        self._process.join(30)
        start, end = window
        latencies = tuple(1000 * lat for at, lat in data["chunks"] if start <= at <= end)
        return Victims(
            latencies_ms=latencies,
            utterances=data["utterances"],
            verified=data["verified"],
            renewed=data["renewed"],
            failures=tuple(data["failures"]),
        )
