"""Places: the ways one client can keep one of ``ASR_MAX_SESSIONS`` (or of its own
address's ``ASR_MAX_SESSIONS_PER_CLIENT``, or of the admission line) from everyone else,
and how long each lasts.

Each probe holds ``HOLDERS`` places from one address in the cheapest way it knows and
measures how long the server lets each one stay (``held_s``, open to close), so that
what it costs the attacker to hold a place for good is one connection and its bytes per
``held_s``: ``bytes_per_place_s`` below.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Sequence

from websockets.exceptions import ConnectionClosed

from bench.abuse.probes.attack import Attack
from bench.abuse.probes.clients import FRAME_20MS, Ws, config, now, open_ws
from bench.abuse.probes.context import Context
from bench.abuse.probes.model import AttackFn, Measured, Probe, Verdict, held_at_most
from bench.common.messages import END

HOLDERS = 8  # places one address holds at once (ASR_MAX_SESSIONS_PER_CLIENT in the profile)
REALTIME = "/v1/realtime?intent=transcription"
REALTIME_16K = json.dumps(
    {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}},
        },
    }
)
REALTIME_DRIP = json.dumps(
    {"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(FRAME_20MS)).decode()}
)


async def _hold(
    ws: Ws, ctx: Context, first: list[str | bytes], again: list[str | bytes], every_s: float
) -> None:
    """Send ``first``, then ``again`` at once and every ``every_s`` (nothing when empty),
    until the server closes the connection; count how long it stayed open."""
    tally = ctx.tally
    tally.hold()

    async def sender() -> None:
        with contextlib.suppress(ConnectionClosed):
            for message in first:
                await ws.send(message)
            while again:
                for message in again:
                    await ws.send(message)
                await asyncio.sleep(every_s)

    async with asyncio.TaskGroup() as group:
        feeding = group.create_task(sender())
        code = await ws.until_closed(timeout=ctx.seconds + 60)
        feeding.cancel()
    tally.release(now() - ws.opened_at)
    tally.outcome(f"close {code}")
    if code is None:
        await ws.aclose()


def holding(
    path: str, first: list[str | bytes], again: Sequence[str | bytes] = (), every: str = ""
) -> AttackFn:
    """An attack: ``HOLDERS`` connections from one address, each sending ``first``, then
    ``again`` every ``every`` (a share of a setting: "0.8*ASR_IDLE_TIMEOUT")."""

    async def attack(ctx: Context) -> Attack:
        share, _, name = every.partition("*")
        every_s = float(share) * ctx.setting(name) if every else 0.0
        started = now()
        async with asyncio.TaskGroup() as group:
            for _ in range(HOLDERS):
                ws = await open_ws(ctx.url(path), ctx.source(0), ctx.tally)
                group.create_task(_hold(ws, ctx, first, list(again), every_s))
        tally = ctx.tally
        held = sum(tally.held_s) / max(1, len(tally.held_s))
        per_place = tally.sent / HOLDERS
        tally.figures["bytes_per_place"] = round(per_place)
        tally.figures["bytes_per_place_s"] = round(per_place / held, 1) if held else 0.0
        tally.note = (
            f"{HOLDERS} places held {held:.1f} s each for {per_place:.0f} B each:"
            f" {per_place / held:.0f} B/s and a handshake every {held:.1f} s keep one"
            if held
            else "nothing held"
        )
        return tally.frozen(now() - started)

    return attack


def _per_client_judge(measured: Measured) -> Verdict:
    attack = measured.attack
    cap = int(measured.setting("ASR_MAX_SESSIONS_PER_CLIENT"))
    admitted = int(attack.figures.get("admitted", -1))
    refused_ms = float(attack.figures.get("refused_close_ms_max", 1e9))
    holds = admitted == cap and refused_ms < 1000
    return Verdict(holds, f"{admitted} admitted of cap {cap}; refused within {refused_ms:.0f} ms")


async def _per_client(ctx: Context) -> Attack:
    """``cap + 4`` sessions from one address at once, each a config and 20 ms of audio."""
    tally = ctx.tally
    cap = int(ctx.setting("ASR_MAX_SESSIONS_PER_CLIENT"))
    started = now()
    opened: list[Ws] = []
    for _ in range(cap + 4):
        ws = await open_ws(ctx.url(), ctx.source(1), tally)
        with contextlib.suppress(ConnectionClosed):  # a refused one may be closed already
            await ws.send(config())
            await ws.send(bytes(FRAME_20MS))
        opened.append(ws)
    # Held a little under the idle deadline, beside the victims, then closed.
    hold_s = 0.8 * ctx.setting("ASR_IDLE_TIMEOUT")
    codes = await asyncio.gather(*(ws.until_closed(timeout=hold_s) for ws in opened))
    refused_ms = [1000 * (ws.closed_at - ws.opened_at) for ws in opened if ws.closed_at]
    for _ in range(codes.count(None)):
        tally.hold()
    for ws, code in zip(opened, codes, strict=True):
        if code is None:
            await ws.aclose()
            tally.release(now() - ws.opened_at)
            tally.outcome("admitted")
        else:
            tally.outcome(f"refused {code}")
    admitted = codes.count(None)
    tally.figures["admitted"] = admitted
    tally.figures["refused_close_ms_max"] = round(max(refused_ms, default=0.0), 1)
    tally.note = (
        f"{admitted} admitted, {len(refused_ms)} refused at most"
        f" {max(refused_ms, default=0.0):.0f} ms after connecting"
    )
    return tally.frozen(now() - started)


def _drip_judge(measured: Measured) -> Verdict:
    return held_at_most(measured.setting("ASR_MAX_SESSION_SECONDS"))(measured)


PROBES = [
    Probe(
        "silent",
        "places",
        "/",
        "connect and send nothing",
        "ASR_CONFIG_TIMEOUT",
        holding("/", []),
        lambda m: held_at_most(m.setting("ASR_CONFIG_TIMEOUT"))(m),
    ),
    Probe(
        "silent-realtime",
        "places",
        "/v1/realtime",
        "connect and send nothing",
        "ASR_FIRST_AUDIO_TIMEOUT (the first turn opens at the connect)",
        holding(REALTIME, []),
        lambda m: held_at_most(m.setting("ASR_FIRST_AUDIO_TIMEOUT"))(m),
    ),
    Probe(
        "config-no-audio",
        "places",
        "/",
        "a config, then nothing",
        "ASR_FIRST_AUDIO_TIMEOUT",
        holding("/", [config()]),
        lambda m: held_at_most(m.setting("ASR_FIRST_AUDIO_TIMEOUT"))(m),
    ),
    Probe(
        "config-end-cycles",
        "places",
        "/",
        "a config and an end every 0.8 x ASR_IDLE_TIMEOUT, no audio",
        "ASR_IDLE_TIMEOUT (only audio puts it off); 16 empty utterances",
        holding("/", [], [config(), END], "0.8*ASR_IDLE_TIMEOUT"),
        lambda m: held_at_most(m.setting("ASR_IDLE_TIMEOUT"))(m),
    ),
    Probe(
        "update-cycles-realtime",
        "places",
        "/v1/realtime",
        "a session.update every 0.8 x ASR_IDLE_TIMEOUT, no audio",
        "ASR_FIRST_AUDIO_TIMEOUT / ASR_IDLE_TIMEOUT (updates do not put them off)",
        holding(REALTIME, [], [REALTIME_16K], "0.8*ASR_IDLE_TIMEOUT"),
        lambda m: held_at_most(
            max(m.setting("ASR_IDLE_TIMEOUT"), m.setting("ASR_FIRST_AUDIO_TIMEOUT"))
        )(m),
    ),
    Probe(
        "drip",
        "places",
        "/",
        "a config, then 20 ms of audio every 0.8 x ASR_IDLE_TIMEOUT",
        "ASR_MAX_SESSION_SECONDS (wall clock)",
        holding("/", [config()], [bytes(FRAME_20MS)], "0.8*ASR_IDLE_TIMEOUT"),
        _drip_judge,
    ),
    Probe(
        "drip-realtime",
        "places",
        "/v1/realtime",
        "20 ms of 16 kHz audio appended every 0.8 x ASR_IDLE_TIMEOUT",
        "ASR_MAX_SESSION_SECONDS (wall clock)",
        holding(REALTIME, [REALTIME_16K], [REALTIME_DRIP], "0.8*ASR_IDLE_TIMEOUT"),
        _drip_judge,
    ),
    Probe(
        "per-client",
        "places",
        "/",
        "cap + 4 sessions from one address, each holding with a drip",
        "ASR_MAX_SESSIONS_PER_CLIENT (8 here; the default 0 is no cap)",
        _per_client,
        _per_client_judge,
    ),
]
