"""Parked slots: resumable sessions whose connection an attacker drops on purpose (the
session frame read, then the TCP connection aborted: no close frame), and resumes made
to cost us (a storm on one session, many small ones).

A parked session keeps its place, its streams and its results for ``ASR_RESUME_WINDOW``;
at most ``ASR_MAX_PARKED_PER_CLIENT`` of one address and ``ASR_MAX_PARKED_SESSIONS`` in
all. Each resume replays what the client has not acknowledged, at most
``ASR_MAX_RESUMES_PER_MINUTE`` a minute (5 at once), else 4429.
"""

from __future__ import annotations

import asyncio

from websockets.exceptions import ConnectionClosed

from bench.abuse.probes.attack import Attack
from bench.abuse.probes.clients import CHUNK_600MS, Ws, config, now, open_ws
from bench.abuse.probes.context import Context
from bench.abuse.probes.model import Judge, Measured, Probe, Verdict
from gateway.session.outbox import RESUME_BYTES, UNSENT_BYTES, held_bytes
from gateway.session.resume.resumability import RESUME_BURST

PARKED_SHARE = 8  # ASR_MAX_PARKED_PER_CLIENT's default
PARKED_ALL = 64  # ASR_MAX_PARKED_SESSIONS' default
# A storm outlasts the profile's idle deadline; its setup sends ~25 s of audio.
RESUME_ENV = {"ASR_IDLE_TIMEOUT": "30", "ASR_MAX_SESSION_SECONDS": "300"}
# A parked session is still a live one of its address's: under the profile's per-address
# cap of 8 the ninth could not even start. The default (0: no cap) lets the share show.
PARKING_ENV = {"ASR_MAX_SESSIONS_PER_CLIENT": "0"}
LONG_NAME = "x" * 256  # the longest wav_name: the largest result frames


async def session_frame(ws: Ws) -> dict[str, object]:
    frame = await ws.json(timeout=10)
    if frame is None or frame.get("type") != "session":
        raise RuntimeError(f"expected a session frame, got {frame}")
    return frame


async def park_one(ctx: Context, source: str) -> None:
    """A resumable session: a config, 1.2 s of audio (two results), then the drop."""
    ws = await open_ws(ctx.url(), source, ctx.tally)
    try:
        await ws.send(config(resumable=True))
        await session_frame(ws)
    except (ConnectionClosed, RuntimeError):
        ctx.tally.outcome(f"refused {await ws.until_closed(5)}")
        return
    await ws.send(bytes(2 * CHUNK_600MS))
    results = 0
    while results < 2:
        frame = await ws.json(timeout=10)
        if frame is None:
            raise RuntimeError("the session closed before its results")
        results += "result_id" in frame
    ws.abort()


async def _gauge(ctx: Context, name: str) -> float:
    return (await ctx.metrics()).get(name, 0.0)


async def park(ctx: Context, addresses: int, each: int) -> Attack:
    """``each`` sessions from each of ``addresses`` addresses, parked; then how many the
    gateway parked, refused, and how long until the last was let go."""
    tally = ctx.tally
    started = now()
    refused_before = await _gauge(ctx, "asr_parking_refused_total")
    rss_before = ctx.gateway.rss_mib()
    for address in range(addresses):
        for _ in range(each):
            await park_one(ctx, ctx.source(10 + address))
    dropped = now()
    await asyncio.sleep(0.5)
    parked = int(await _gauge(ctx, "asr_sessions_parked"))
    rss_parked = ctx.gateway.rss_mib()
    refused = int(await _gauge(ctx, "asr_parking_refused_total") - refused_before)
    for _ in range(parked):
        tally.hold()
    while now() - dropped < 120:
        if not await _gauge(ctx, "asr_sessions_parked"):
            break
        await asyncio.sleep(0.1)  # the gateway's gauge is all there is to wait on
    for _ in range(parked):
        tally.release(now() - dropped)
    tally.outcomes["parked"] = parked
    tally.outcomes["ended at the drop"] = refused
    tally.figures.update(
        parked=parked,
        refused=refused,
        kib_per_parked=round(1024 * (rss_parked - rss_before) / max(1, parked), 1),
    )
    tally.note = (
        f"{addresses * each} sessions from {addresses} address(es) dropped: {parked} parked,"
        f" {refused} ended at the drop; {1024 * (rss_parked - rss_before) / max(1, parked):.0f}"
        " KiB of RSS each while parked"
    )
    return tally.frozen(now() - started)


async def _per_client(ctx: Context) -> Attack:
    return await park(ctx, 1, PARKED_SHARE + 1)


async def _all(ctx: Context) -> Attack:
    return await park(ctx, PARKED_ALL // PARKED_SHARE + 1, PARKED_SHARE)


def _parking_judge(limit: str, default: int, expect_refused: int) -> Judge:
    def judge(measured: Measured) -> Verdict:
        parked = int(measured.attack.figures["parked"])
        refused = int(measured.attack.figures["refused"])
        window = measured.setting("ASR_RESUME_WINDOW")
        longest = max(measured.attack.held_s, default=0.0)
        bound = int(measured.setting(limit)) if limit in measured.env else default
        holds = parked <= bound and refused >= expect_refused and longest <= window + 1.5
        return Verdict(
            holds,
            f"{parked} parked (bound {bound}), {refused} refused, let go {longest:.1f} s after"
            f" the drop (window {window:g} s)",
        )

    return judge


async def results_session(
    ctx: Context, source: str, target_bytes: int
) -> tuple[Ws, str, list[int]]:
    """A resumable session with ``chunk_size`` [0, 1, 0] (a result per 1920 bytes of audio)
    and the longest name, fed until the results it was sent hold ``target_bytes``; the
    results are read and never acknowledged. Returns it, its token and the memory each
    result holds in the outbox (``gateway.outbox.held_bytes``), oldest first."""
    ws = await open_ws(ctx.url(), source, ctx.tally)
    await ws.send(config(resumable=True, chunk_size=[0, 1, 0], wav_name=LONG_NAME))
    token = str((await session_frame(ws))["resume_token"])
    sizes: list[int] = []
    while sum(sizes) < target_bytes:
        await ws.send(bytes(CHUNK_600MS))  # 10 results
        expected = len(sizes) + 10
        while len(sizes) < expected:
            message = await ws.recv(timeout=10)
            if message is None:
                raise RuntimeError("the session closed while it was being fed")
            if '"result_id"' in str(message):
                sizes.append(held_bytes(str(message).encode()))
    return ws, token, sizes


def retained_from(sizes: list[int], retain: int) -> int:
    """How many of the newest frames a resumable outbox keeps after sending them."""
    total, count = 0, 0
    for size in reversed(sizes):
        if total + size > retain:
            break
        total, count = total + size, count + 1
    return count


async def _resume(ctx: Context, token: str, last: int, replay: int) -> tuple[str | None, int]:
    """One resume: the next token (None: refused, counted by its code) and the bytes of
    the results replayed; the connection is then dropped."""
    tally = ctx.tally
    url = ctx.url(f"/?resume={token}&last_result={last}")
    ws = await open_ws(url, ctx.source(30), tally)
    received = tally.received
    first = await ws.json(timeout=10)
    if first is None or first.get("type") != "session":
        code = await ws.until_closed(timeout=5)
        tally.outcome(f"refused {code}")
        return None, 0
    replayed = 0
    while replayed < replay:
        frame = await ws.json(timeout=10)
        if frame is None:
            break
        replayed += "result_id" in frame
    tally.outcome("resumed")
    bytes_replayed = tally.received - received
    ws.abort()
    return str(first["resume_token"]), bytes_replayed


async def _storm(ctx: Context) -> Attack:
    """One session holding its most results; resumed as fast as a client can for
    ``ctx.seconds``, each asking for every result it keeps, each connection dropped."""
    tally = ctx.tally
    retain = RESUME_BYTES - UNSENT_BYTES
    ws, token, sizes = await results_session(ctx, ctx.source(30), retain + 32 * 1024)
    ws.abort()
    replay = retained_from(sizes, retain) - 2  # a margin: the outbox keeps these for sure
    last = len(sizes) - replay
    await asyncio.sleep(0.2)
    sent, started = tally.sent, now()
    resumed: list[int] = []
    attempts = 0
    while now() - started < ctx.seconds:
        attempts += 1
        next_token, replayed = await _resume(ctx, token, last, replay)
        if next_token is not None:
            token = next_token
            resumed.append(replayed)
    seconds = now() - started
    rate = float(ctx.env.get("ASR_MAX_RESUMES_PER_MINUTE", "30"))
    per_resume = sum(resumed) / max(1, len(resumed))
    per_attempt = (tally.sent - sent) / max(1, attempts)
    tally.figures.update(
        attempts=attempts,
        resumed=len(resumed),
        allowed=round(RESUME_BURST + rate * seconds / 60, 1),
        kib_replayed_per_resume=round(per_resume / 1024, 1),
        kib_held_replayed=round(sum(sizes[last:]) / 1024, 1),
        attacker_bytes_per_attempt=round(per_attempt),
    )
    tally.note = (
        f"{attempts} resumes in {seconds:.1f} s ({per_attempt:.0f} B each): {len(resumed)}"
        f" served, each replaying {replay} results ({per_resume / 1024:.0f} KiB on the wire),"
        " the rest refused"
    )
    tally.hold()
    tally.release(seconds)
    return tally.frozen(seconds)


def _storm_judge(measured: Measured) -> Verdict:
    figures = measured.attack.figures
    resumed, allowed = int(figures["resumed"]), float(figures["allowed"])
    kib = float(figures["kib_replayed_per_resume"])
    holds = resumed <= allowed + 1 and kib <= (RESUME_BYTES + 16 * 1024) / 1024
    return Verdict(
        holds,
        f"{resumed} resumes served against {allowed:g} allowed (5 at once + the rate);"
        f" {kib:.0f} KiB replayed each against the outbox's 256 KiB",
    )


async def _many_small(ctx: Context) -> Attack:
    """``PARKED_SHARE`` parked sessions, resumed round-robin for ``ctx.seconds`` with
    nothing to replay: what a resume's handshake and checks cost."""
    tally = ctx.tally
    sessions: list[tuple[str, int]] = []
    for _ in range(PARKED_SHARE):
        ws, token, sizes = await results_session(ctx, ctx.source(31), 1)
        ws.abort()
        sessions.append((token, len(sizes)))
    started, attempts, served = now(), 0, 0
    while now() - started < ctx.seconds:
        index = attempts % len(sessions)
        token, newest = sessions[index]
        next_token, _ = await _resume(ctx, token, newest, 0)
        attempts += 1
        if next_token is not None:
            sessions[index] = (next_token, newest)
            served += 1
    seconds = now() - started
    tally.figures.update(attempts=attempts, resumed=served, per_s=round(attempts / seconds, 1))
    tally.note = (
        f"{attempts} resumes of {len(sessions)} parked sessions in {seconds:.1f} s"
        f" ({attempts / seconds:.0f}/s), {served} served, the rest 4429"
    )
    tally.hold()
    tally.release(seconds)
    return tally.frozen(seconds)


def _many_judge(measured: Measured) -> Verdict:
    figures = measured.attack.figures
    seconds = measured.attack.seconds
    allowed = PARKED_SHARE * (RESUME_BURST + 30 * seconds / 60)
    resumed = int(figures["resumed"])
    return Verdict(
        resumed <= allowed + PARKED_SHARE,
        f"{resumed} served against {allowed:.0f} allowed; each refusal is a handshake"
        " and an HMAC check (no bound on attempts: README promises none)",
    )


PROBES = [
    Probe(
        "parked-per-client",
        "parked slots",
        "/",
        "9 resumable sessions from one address, each dropped after its session frame",
        "ASR_MAX_PARKED_PER_CLIENT (8), ASR_RESUME_WINDOW",
        _per_client,
        _parking_judge("ASR_MAX_PARKED_PER_CLIENT", PARKED_SHARE, 1),
        PARKING_ENV,
    ),
    Probe(
        "parked-all",
        "parked slots",
        "/",
        "8 resumable sessions from each of 9 addresses, each dropped",
        "ASR_MAX_PARKED_SESSIONS (64), ASR_RESUME_WINDOW",
        _all,
        _parking_judge("ASR_MAX_PARKED_SESSIONS", PARKED_ALL, PARKED_SHARE),
        PARKING_ENV,
    ),
    Probe(
        "resume-storm",
        "parked slots",
        "/",
        "one session with ~190 KiB of results kept, resumed back to back asking for all",
        "ASR_MAX_RESUMES_PER_MINUTE (30, 5 at once); 4429",
        _storm,
        _storm_judge,
        RESUME_ENV,
    ),
    Probe(
        "resumes-many",
        "event-loop time",
        "/",
        "8 parked sessions resumed round-robin, nothing to replay",
        "ASR_MAX_RESUMES_PER_MINUTE per session; nothing on attempts",
        _many_small,
        _many_judge,
        RESUME_ENV,
    ),
]
