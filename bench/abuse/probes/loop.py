"""Event-loop time: frames and events that cost the gateway's one event loop more than they
cost the client to send (tiny frames, text frames of the largest size parsed as JSON,
realtime updates and appends), and handshakes.

A paced probe sends at ``PACE`` of ``ASR_MAX_FRAMES_PER_SECOND``'s tokens, each frame
costing what ``gateway.limits.rate`` charges for it (never closed: the most a client may
do for as long as it likes) from ``CONNECTIONS`` connections of one address,
with 20 ms of audio every second so that the idle deadline never ends it; its cost to us
is the gateway's share of a core over what the victims alone cost. An unpaced probe sends
as fast as it can and is closed by the cap; its cost is per connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics

from websockets.exceptions import ConnectionClosed

from bench.abuse.probes.attack import Attack
from bench.abuse.probes.clients import FRAME_20MS, Ws, config, now, open_ws
from bench.abuse.probes.context import Context
from bench.abuse.probes.model import AttackFn, Judge, Measured, Probe, Verdict
from bench.abuse.probes.places import REALTIME, REALTIME_16K, REALTIME_DRIP
from gateway.limits.rate import frame_cost, text_cost
from shared.settings_table import MAX_TEXT_BYTES

PACE = 0.95
CONNECTIONS = 8  # one address's share under the profile's ASR_MAX_SESSIONS_PER_CLIENT
TINY = b"\x01\x02"


def _many_keys(size: int, first: dict[str, object]) -> str:
    """A JSON object of ``size`` bytes: ``first``'s fields, then as many unknown keys as
    fit (each one a dict entry the parser builds)."""
    head = json.dumps(first)[:-1]
    keys = []
    length = len(head) + 1
    index = 0
    while True:
        key = f', "k{index:05d}": 0'
        if length + len(key) > size:
            break
        keys.append(key)
        length += len(key)
        index += 1
    return head + "".join(keys) + "}"


TEXT_MAX = _many_keys(MAX_TEXT_BYTES.default, {"is_speaking": True})
TEXT_FLAT = json.dumps({"is_speaking": True, "x": "a" * (MAX_TEXT_BYTES.default - 40)})
NESTED = "[" * (MAX_TEXT_BYTES.default // 2) + "]" * (MAX_TEXT_BYTES.default // 2)
HOTWORDS = " ".join(f"w{index:030d}" for index in range(256))  # 256 words, ~8 KiB
UPDATE_MAX = _many_keys(
    MAX_TEXT_BYTES.default - 64,
    {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {"input": {"transcription": {"prompt": HOTWORDS}}},
        },
    },
)
TINY_APPEND = json.dumps({"type": "input_audio_buffer.append", "audio": "AAA="})


async def drain(ws: Ws) -> None:
    """Read whatever the server sends until the connection closes."""
    while await ws.recv() is not None:
        pass


def paced(path: str, first: list[str | bytes], frame: str | bytes, drip: str | bytes) -> AttackFn:
    """``CONNECTIONS`` connections each sending ``first``, then ``frame`` at ``PACE`` of the
    cap, and ``drip`` every second, for ``ctx.seconds``."""

    async def attack(ctx: Context) -> Attack:
        tally = ctx.tally
        cost = text_cost(len(frame)) if isinstance(frame, str) else frame_cost(len(frame))
        rate = PACE * ctx.setting_or("ASR_MAX_FRAMES_PER_SECOND", 200) / max(cost, 1e-3)
        started = now()
        sent: list[int] = []

        async def one(ws: Ws) -> None:
            count = 0
            tally.hold()
            async with asyncio.TaskGroup() as group:
                reading = group.create_task(drain(ws))  # what we answer is read, as it comes
                with contextlib.suppress(ConnectionClosed):
                    for message in first:
                        await ws.send(message)
                    begin = next_drip = now()
                    while now() - begin < ctx.seconds:
                        if now() >= next_drip:
                            await ws.send(drip)
                            next_drip += 1.0
                        await ws.send(frame)
                        count += 1
                        await asyncio.sleep(max(0.0, begin + count / rate - now()))
                sent.append(count)
                tally.outcome(f"close {ws.code}" if ws.closed else "still open")
                await ws.aclose()
                reading.cancel()
            tally.release(now() - ws.opened_at)

        sockets = [await open_ws(ctx.url(path), ctx.source(70), tally) for _ in range(CONNECTIONS)]
        async with asyncio.TaskGroup() as group:
            for ws in sockets:
                group.create_task(one(ws))
        seconds = now() - started
        size = len(frame.encode()) if isinstance(frame, str) else len(frame)
        tally.figures.update(frames=sum(sent), frame_bytes=size, per_s=sum(sent) / seconds)
        tally.note = (
            f"{CONNECTIONS} connections at {rate:.1f} frames/s each ({cost:g} tokens a frame),"
            f" frames of {size / 1024:.1f} KiB: {sum(sent) / seconds:.0f} frames/s in all"
        )
        return tally.frozen(seconds)

    return attack


def unpaced(
    path: str, first: list[str | bytes], frame: str | bytes, *, once: bool = False
) -> AttackFn:
    """Connections one after another for ``ctx.seconds``, each sending ``first`` and then
    ``frame`` as fast as it can until the server closes it (``once``: a single one)."""

    async def attack(ctx: Context) -> Attack:
        tally = ctx.tally
        started = now()
        frames: list[int] = []
        close_ms: list[float] = []
        while now() - started < ctx.seconds:
            ws = await open_ws(ctx.url(path), ctx.source(71), tally)
            tally.hold()
            count = 0
            begin = now()
            with contextlib.suppress(ConnectionClosed):
                for message in first:
                    await ws.send(message)
                while now() - begin < 10:
                    await ws.send(frame)
                    count += 1
                    if once:
                        break
                    if count % 64 == 0:
                        await asyncio.sleep(0)  # let the close in
                        if ws.closed:
                            break
            code = await ws.until_closed(5)
            close_ms.append(1000 * (now() - begin))
            frames.append(count)
            tally.outcome(f"close {code}")
            tally.release(now() - ws.opened_at)
            if code is None:
                await ws.aclose()
        seconds = now() - started
        tally.figures.update(
            connections=len(frames),
            frames_median=statistics.median(frames),
            close_ms_median=round(statistics.median(close_ms), 1),
        )
        tally.note = (
            f"{len(frames)} connections one after another, each closed after a median"
            f" {statistics.median(frames):.0f} frames, {statistics.median(close_ms):.0f} ms"
        )
        return tally.frozen(seconds)

    return attack


def _share_judge(measured: Measured) -> Verdict:
    """No promise on CPU: the README bounds frames, not what each costs; say what it is."""
    footprint = measured.footprint
    share = footprint.cpu_s / footprint.wall_s
    return Verdict(
        None,
        f"the gateway at {100 * share:.0f} % of a core (victims included);"
        f" victims' p99 {measured.victims.p99_ms:.0f} ms against {measured.baseline.p99_ms:.0f}",
    )


def _closed_judge(code: int) -> Judge:
    def judge(measured: Measured) -> Verdict:
        outcomes = measured.attack.outcomes
        closed = outcomes.get(f"close {code}", 0)
        total = sum(outcomes.values())
        ms = float(measured.attack.figures.get("close_ms_median", 0))
        return Verdict(
            closed == total and total > 0,
            f"{closed} of {total} closed with {code}, a median {ms:.0f} ms after the first frame",
        )

    return judge


def handshakes(full: bool) -> AttackFn:
    """Connections opened and closed as fast as four clients can, for ``ctx.seconds``:
    each is read until the server closes it (``full``: every place taken first, so 1013
    at once), or closed by the client at once."""

    async def attack(ctx: Context) -> Attack:
        return await _handshakes(ctx, full)

    return attack


async def _handshakes(ctx: Context, full: bool) -> Attack:
    tally = ctx.tally
    counts: list[int] = []

    async def client(index: int, started: float) -> None:
        count = 0
        while now() - started < ctx.seconds:
            ws = await open_ws(ctx.url(), ctx.source(80 + index), tally)
            code = await ws.until_closed(1.0) if full else None
            tally.outcome(f"close {code}" if code is not None else "closed by the client")
            if code is None:
                await ws.aclose()
            count += 1
        counts.append(count)

    holders = await _fill(ctx) if full else []
    started = now()
    async with asyncio.TaskGroup() as group:
        for index in range(4):
            group.create_task(client(index, started))
    seconds = now() - started
    for ws in holders:
        await ws.aclose()
    tally.figures.update(handshakes=sum(counts), per_s=round(sum(counts) / seconds, 1))
    server = "a full server" if holders else "a server with places free"
    tally.note = f"{sum(counts)} handshakes against {server}: {sum(counts) / seconds:.0f}/s"
    tally.hold()
    tally.release(seconds)
    return tally.frozen(seconds)


async def _fill(ctx: Context) -> list[Ws]:
    """Take every place the victims left, each held with 20 ms of audio."""
    free = int(ctx.setting("ASR_MAX_SESSIONS")) - int((await ctx.metrics())["asr_sessions_active"])
    holders = []
    for index in range(free):
        ws = await open_ws(ctx.url(), ctx.source(90 + index // 8), ctx.tally)
        await ws.send(config())
        await ws.send(bytes(FRAME_20MS))
        holders.append(ws)
    return holders


def _handshake_judge(measured: Measured) -> Verdict:
    per_s = float(measured.attack.figures["per_s"])
    cpu_ms = 1000 * measured.footprint.cpu_s / max(1, int(measured.attack.figures["handshakes"]))
    return Verdict(
        None,
        f"{per_s:.0f} handshakes/s at {cpu_ms:.2f} ms of gateway CPU each; nothing bounds the"
        " rate (uvicorn's --limit-concurrency bounds connections at once, not their rate)",
    )


PROBES = [
    Probe(
        "tiny-frames",
        "event-loop time",
        "/",
        "2-byte binary frames, unpaced, connection after connection",
        "ASR_MAX_FRAMES_PER_SECOND (200, one second's burst)",
        unpaced("/", [config()], TINY),
        _closed_judge(1008),
    ),
    Probe(
        "tiny-frames-paced",
        "event-loop time",
        "/",
        "2-byte binary frames at 95 % of the frame cap, 8 connections",
        "ASR_MAX_FRAMES_PER_SECOND; ASR_MAX_SESSIONS_PER_CLIENT",
        paced("/", [config()], TINY, bytes(FRAME_20MS)),
        _share_judge,
    ),
    Probe(
        "text-max",
        "event-loop time",
        "/",
        "64 KiB JSON text frames (~5,900 unknown keys) at 95 % of the frame cap, 8 connections",
        "ASR_MAX_FRAMES_PER_SECOND, a token per KiB of text (gateway.limits.rate)",
        paced("/", [config()], TEXT_MAX, bytes(FRAME_20MS)),
        _share_judge,
    ),
    Probe(
        "text-max-flat",
        "event-loop time",
        "/",
        "64 KiB JSON text frames of one long string at 95 % of the cap, 8 connections",
        "ASR_MAX_FRAMES_PER_SECOND, a token per KiB of text (gateway.limits.rate)",
        paced("/", [config()], TEXT_FLAT, bytes(FRAME_20MS)),
        _share_judge,
    ),
    Probe(
        "text-nested",
        "event-loop time",
        "/",
        "a 64 KiB text frame nested 32,768 deep, connection after connection",
        "ASR_MAX_TEXT_BYTES; JSON's recursion limit (1008)",
        unpaced("/", [], NESTED, once=True),
        _closed_judge(1008),
    ),
    Probe(
        "update-max-realtime",
        "event-loop time",
        "/v1/realtime",
        "64 KiB session.update (256 hotwords, unknown keys) at 95 % of the cap, 8 connections",
        "ASR_MAX_FRAMES_PER_SECOND, a token per KiB of an event's JSON",
        paced(REALTIME, [REALTIME_16K], UPDATE_MAX, REALTIME_DRIP),
        _share_judge,
    ),
    Probe(
        "appends-tiny-realtime",
        "event-loop time",
        "/v1/realtime",
        "appends of one sample at 95 % of the cap, 8 connections",
        "ASR_MAX_FRAMES_PER_SECOND (an append costs by its audio)",
        paced(REALTIME, [REALTIME_16K], TINY_APPEND, REALTIME_DRIP),
        _share_judge,
    ),
    Probe(
        "appends-tiny-flood-realtime",
        "event-loop time",
        "/v1/realtime",
        "appends of one sample, unpaced, connection after connection",
        "ASR_MAX_FRAMES_PER_SECOND",
        unpaced(REALTIME, [REALTIME_16K], TINY_APPEND),
        _closed_judge(1008),
    ),
    Probe(
        "handshakes-open",
        "event-loop time",
        "/",
        "connections opened and closed at once by 4 clients, places free",
        "none on the rate",
        handshakes(full=False),
        _handshake_judge,
    ),
    Probe(
        "handshakes-full",
        "event-loop time",
        "/",
        "connections opened by 4 clients against a full server (1013 at once)",
        "ASR_MAX_SESSIONS (refused at once); none on the rate",
        handshakes(full=True),
        _handshake_judge,
        {"ASR_MAX_SESSIONS": "12"},
    ),
]
