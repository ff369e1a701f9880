"""Memory: what one client can make the gateway process hold, against the README's bounds:
a parked session's outbox (256 KiB of results), offline audio held whole
(``ASR_MAX_BUFFERED_SECONDS``), frames and realtime appends of the largest size.

The RSS figures are the gateway process's, sampled every 50 ms while the probe runs (the
peak) and read once everything is held (per resource)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json

from websockets.exceptions import ConnectionClosed

from bench.abuse.probes.attack import Attack
from bench.abuse.probes.clients import CHUNK_600MS, Ws, config, now, open_ws
from bench.abuse.probes.context import Context
from bench.abuse.probes.model import AttackFn, Measured, Probe, Verdict
from bench.abuse.probes.parked import LONG_NAME, PARKED_SHARE, park_one, results_session
from bench.abuse.probes.places import REALTIME
from gateway.session.outbox import RESUME_BYTES, UNSENT_BYTES
from gateway.session.reader import EVENT_BUFFER
from shared.settings_table import MAX_FRAME_BYTES as FRAME_SETTING

OUTBOX_ENV = {
    "ASR_MAX_SESSION_SECONDS": "300",
    "ASR_IDLE_TIMEOUT": "30",
    "ASR_RESUME_WINDOW": "15",
    "ASR_MAX_SESSIONS_PER_CLIENT": "0",
}
HELD_ENV = {"ASR_MAX_SESSION_SECONDS": "300", "ASR_IDLE_TIMEOUT": "30"}
# A session long enough that frames, not the session's audio, are what the probe meets.
LONG_ENV = {"ASR_MAX_SESSION_SECONDS": "3600", "ASR_IDLE_TIMEOUT": "30"}
UVICORN_QUEUE = 32  # uvicorn's --ws-max-queue: messages it reads ahead of the app
MAX_FRAME_BYTES = FRAME_SETTING.default
G711_RATE = 8000


async def _full_outbox(ctx: Context, source: str) -> None:
    """A session whose outbox is full (192 KiB of results sent and kept, then 64 KiB that
    a reader that stopped reading left unsent), then dropped."""
    retain = RESUME_BYTES - UNSENT_BYTES
    ws, _, _ = await results_session(ctx, source, retain + 16 * 1024)
    # It stops reading: results back up through uvicorn's buffer into the outbox, and
    # the workers' stream window behind it; its sends stop when the reader is full.
    with contextlib.suppress(TimeoutError, ConnectionClosed):
        for _ in range(60):
            await asyncio.wait_for(ws.send(bytes(CHUNK_600MS)), 1.0)
    await asyncio.sleep(0.5)
    ws.abort()


async def _parked_outboxes(ctx: Context) -> Attack:
    tally = ctx.tally
    started = now()
    gateway = ctx.gateway
    count = 2 * PARKED_SHARE  # two addresses' shares
    rss = gateway.rss_mib()
    for index in range(count):
        await park_one(ctx, ctx.source(40 + index // PARKED_SHARE))
    await asyncio.sleep(1.0)
    bare = gateway.rss_mib()
    for index in range(count):
        await _full_outbox(ctx, ctx.source(42 + index // PARKED_SHARE))
    await asyncio.sleep(1.0)
    full = gateway.rss_mib()
    parked = int((await ctx.metrics()).get("asr_sessions_parked", 0))
    for _ in range(parked):
        tally.hold()
    dropped = now()
    while now() - dropped < 60:
        if not (await ctx.metrics()).get("asr_sessions_parked"):
            break
        await asyncio.sleep(0.2)  # the gauge is all there is to wait on
    for _ in range(parked):
        tally.release(now() - dropped)
    bare_kib = 1024 * (bare - rss) / count
    full_kib = 1024 * (full - bare) / count
    tally.figures.update(parked=parked, bare_kib=round(bare_kib), full_kib=round(full_kib))
    tally.outcomes["parked"] = parked
    tally.note = (
        f"{count} parked sessions with 2 results each took {bare_kib:.0f} KiB of RSS each;"
        f" {count} more with full outboxes ({len(LONG_NAME)}-character name, a result per"
        f" 60 ms of audio, ~1 MiB of audio each) {full_kib:.0f} KiB each"
    )
    return tally.frozen(now() - started)


def _outbox_judge(measured: Measured) -> Verdict:
    figures = measured.attack.figures
    full, bare = float(figures["full_kib"]), float(figures["bare_kib"])
    extra = full - bare
    promise = RESUME_BYTES / 1024
    return Verdict(
        extra <= promise * 1.25,
        f"a full outbox's session took {full:.0f} KiB, {extra:.0f} KiB more than a bare"
        f" parked one, against the README's {promise:.0f} KiB of results",
    )


async def _settled(ctx: Context, name: str) -> float:
    """A gauge of the gateway's once it has stopped moving (the audio sent is all read)."""
    last = -1.0
    value = (await ctx.metrics()).get(name, 0.0)
    while value != last:
        await asyncio.sleep(0.3)  # the gauge is all there is to wait on
        last, value = value, (await ctx.metrics()).get(name, 0.0)
    return value


async def _offline_held(ctx: Context) -> Attack:
    """Offline utterances sent as fast as they go and never ended, until their audio is
    more than ``ASR_MAX_BUFFERED_SECONDS``."""
    tally = ctx.tally
    budget_s = ctx.setting("ASR_MAX_BUFFERED_SECONDS")
    each_s = ctx.setting("ASR_MAX_SESSION_SECONDS")
    count = int(budget_s // each_s) + 1
    frame = bytes(range(256)) * 250  # 2 s of audio a frame
    started = now()
    rss = ctx.gateway.rss_mib()
    held: list[Ws] = []
    for _ in range(count):
        ws = await open_ws(ctx.url(), ctx.source(50), tally)
        with contextlib.suppress(ConnectionClosed):
            await ws.send(config(mode="offline"))
            for _ in range(int(each_s * 32000) // len(frame) - 1):
                await ws.send(frame)
        await _settled(ctx, "asr_buffered_audio_seconds")
        code = await ws.until_closed(0.3)
        if code is None:
            tally.hold()
            held.append(ws)
        else:
            tally.outcome(f"closed {code}")
    buffered = max(1.0, await _settled(ctx, "asr_buffered_audio_seconds"))
    rss_grown = ctx.gateway.rss_mib() - rss
    for ws in held:
        await ws.aclose()
        tally.release(now() - ws.opened_at)
        tally.outcome("held")
    per_s = rss_grown * 2**20 / buffered
    tally.figures.update(buffered_s=buffered, budget_s=budget_s, bytes_per_held_s=round(per_s))
    tally.note = (
        f"{count} offline utterances of {each_s:g} s sent unpaced: {len(held)} held"
        f" ({buffered:.0f} s buffered), the rest refused; the gateway grew"
        f" {per_s / 1000:.0f} kB per second held"
    )
    return tally.frozen(now() - started)


def _held_judge(measured: Measured) -> Verdict:
    figures = measured.attack.figures
    per_s = float(figures["bytes_per_held_s"])
    buffered, budget = float(figures["buffered_s"]), float(figures["budget_s"])
    refused = sum(count for what, count in measured.attack.outcomes.items() if "1013" in what)
    holds = buffered <= budget and per_s <= 64_000 * 1.1 and refused >= 1
    return Verdict(
        holds,
        f"{buffered:.0f} s held against {budget:g} s; {per_s / 1000:.0f} kB of RSS a second held"
        f" against the README's 64 kB; {refused} refused with 1013",
    )


async def _flood(ctx: Context, path: str, first: list[str], frame: str | bytes) -> Attack:
    """``PARKED_SHARE`` connections from one address, each sending ``first``, then
    ``frame`` unpaced for ``ctx.seconds`` (a send that waits over 2 s: it has stopped)."""
    tally = ctx.tally
    started = now()
    sent: list[int] = []

    async def one() -> None:
        ws = await open_ws(ctx.url(path), ctx.source(60), tally)
        tally.hold()
        count = 0
        try:
            for message in first:
                await ws.send(message)
            while now() - started < ctx.seconds:
                await asyncio.wait_for(ws.send(frame), 2.0)
                count += 1
        except (ConnectionClosed, TimeoutError):
            pass
        sent.append(count)
        code = await ws.until_closed(1.0)
        tally.outcome(f"close {code}")
        if code is None:
            ws.abort()
        tally.release(now() - ws.opened_at)

    async with asyncio.TaskGroup() as group:
        for _ in range(PARKED_SHARE):
            group.create_task(one())
    size = len(frame.encode()) if isinstance(frame, str) else len(frame)
    tally.figures.update(frames=sum(sent), frame_bytes=size, connections=PARKED_SHARE)
    tally.note = (
        f"{PARKED_SHARE} connections sent {sum(sent)} frames of {size / 1024:.0f} KiB unpaced"
    )
    return tally.frozen(now() - started)


def _g711_first_and_append() -> tuple[str, str]:
    update = {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": None}},
        },
    }
    audio = bytes(range(256)) * (MAX_FRAME_BYTES * G711_RATE // 32000 // 256)
    append = {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()}
    return json.dumps(update), json.dumps(append)


async def _frames_max(ctx: Context) -> Attack:
    return await _flood(ctx, "/", [config()], bytes(MAX_FRAME_BYTES))


async def _appends_max(ctx: Context) -> Attack:
    """G.711 decodes to the most audio per byte: an append of 32.8 s in 341 KiB of JSON."""
    update, append = _g711_first_and_append()
    return await _flood(ctx, REALTIME, [update], append)


def _queue_judge(measured: Measured) -> Verdict:
    """Bounded as designed: per connection, what uvicorn reads ahead and the session's
    events hold, each a frame."""
    figures = measured.attack.figures
    per_connection = measured.footprint.rss_growth_mib / int(figures["connections"])
    frame_mib = int(figures["frame_bytes"]) / 2**20
    bound = (UVICORN_QUEUE + EVENT_BUFFER) * frame_mib
    return Verdict(
        per_connection <= bound,
        f"{per_connection:.1f} MiB per connection at the peak, {per_connection / frame_mib:.1f}"
        f" frames' worth; uvicorn's queue and our events could hold {bound:.0f} MiB",
    )


CHURN_FRAMES = 4  # large frames each churned session sends before it closes
SOAK_LEAK_MIB = 32  # RELIABILITY.md's soak: RSS grown by more than this is a leak


def churning(path: str, first: list[str], frame: str | bytes) -> AttackFn:
    """Rounds of ``PARKED_SHARE`` sessions at once, each sending ``first`` and
    ``CHURN_FRAMES`` of ``frame``, then closing with 1000, for ``ctx.seconds``: what the
    gateway still holds after each round, every session ended."""

    async def attack(ctx: Context) -> Attack:
        tally = ctx.tally
        started = now()
        rss = ctx.gateway.rss_mib()
        after: list[float] = []

        async def one() -> None:
            ws = await open_ws(ctx.url(path), ctx.source(65), tally)
            tally.hold()
            with contextlib.suppress(ConnectionClosed):
                for message in [*first, *[frame] * CHURN_FRAMES]:
                    await ws.send(message)
            await ws.aclose()
            tally.outcome(f"close {ws.code}")
            tally.release(now() - ws.opened_at)

        while now() - started < ctx.seconds:
            async with asyncio.TaskGroup() as group:
                for _ in range(PARKED_SHARE):
                    group.create_task(one())
            await ctx.released()
            after.append(ctx.gateway.rss_mib() - rss)
        await asyncio.sleep(2.0)
        retained = ctx.gateway.rss_mib() - rss
        sessions = len(after) * PARKED_SHARE
        tally.figures.update(
            sessions=sessions,
            retained_mib=round(retained, 1),
            retained_kib_per_session=round(1024 * retained / max(1, sessions)),
        )
        series = ", ".join(f"{mib:+.0f}" for mib in after)
        size = len(frame) if isinstance(frame, bytes) else len(frame.encode())
        tally.note = (
            f"{len(after)} rounds of {PARKED_SHARE} sessions, each {CHURN_FRAMES} frames of"
            f" {size / 2**20:.2f} MiB then a clean close: RSS after each round (every session"
            f" ended) {series} MiB; {retained:+.0f} MiB 2 s after the last"
        )
        return tally.frozen(now() - started)

    return attack


def _churn_judge(measured: Measured) -> Verdict:
    figures = measured.attack.figures
    retained = float(figures["retained_mib"])
    return Verdict(
        retained <= SOAK_LEAK_MIB,
        f"{retained:+.0f} MiB still held after {figures['sessions']} sessions ended"
        f" ({figures['retained_kib_per_session']} KiB each), against the soak's"
        f" {SOAK_LEAK_MIB} MiB for a leak",
    )


PROBES = [
    Probe(
        "parked-outbox",
        "memory",
        "/",
        "16 parked sessions with full outboxes (results unread, [0, 1, 0], 256-char name)",
        "the outbox: 256 KiB of results (64 KiB unsent); ASR_MAX_PARKED_*",
        _parked_outboxes,
        _outbox_judge,
        OUTBOX_ENV,
    ),
    Probe(
        "offline-held",
        "memory",
        "/",
        "offline utterances of ASR_MAX_SESSION_SECONDS sent unpaced, never ended",
        "ASR_MAX_BUFFERED_SECONDS (600 here) for all; ASR_MAX_SESSION_SECONDS each",
        _offline_held,
        _held_judge,
        HELD_ENV,
    ),
    Probe(
        "frames-max",
        "memory",
        "/",
        "8 connections sending frames of ASR_MAX_FRAME_BYTES (1 MiB) unpaced",
        "the workers' backpressure; uvicorn's --ws-max-queue (32) x frame size",
        _frames_max,
        _queue_judge,
        LONG_ENV,
    ),
    Probe(
        "appends-max-realtime",
        "memory",
        "/v1/realtime",
        "8 connections sending G.711 appends of the most audio (32.8 s, 341 KiB) unpaced",
        "ASR_MAX_FRAME_BYTES' seconds per append, decoded a second at a time; --ws-max-queue",
        _appends_max,
        _queue_judge,
        LONG_ENV,
    ),
    Probe(
        "session-churn",
        "memory",
        "/",
        f"rounds of 8 sessions, each {CHURN_FRAMES} frames of 1 MiB, then a clean close",
        "none once a session has ended: what it held should be given back",
        churning("/", [config()], bytes(MAX_FRAME_BYTES)),
        _churn_judge,
        LONG_ENV,
    ),
    Probe(
        "session-churn-realtime",
        "memory",
        "/v1/realtime",
        f"rounds of 8 sessions, each {CHURN_FRAMES} G.711 appends of 32.8 s, then a clean close",
        "none once a session has ended: what it held should be given back",
        churning(REALTIME, [_g711_first_and_append()[0]], _g711_first_and_append()[1]),
        _churn_judge,
        LONG_ENV,
    ),
]
