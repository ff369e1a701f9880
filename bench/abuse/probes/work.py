"""A worker's time: the most audio one session may make the workers decode, and utterances
with no audio (each opens and finishes a worker stream).

The checksum engine costs the workers next to nothing, so these rows measure the gateway's
side (its CPU per audio second, the workers' backpressure on the sender); what a real
model costs a worker per second of audio is in BENCHMARKS.md (the streaming Paraformer on
this machine's CPU: about 20 real-time sessions per replica with ONNX int8)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json

from websockets.exceptions import ConnectionClosed

from bench.abuse.probes.attack import Attack
from bench.abuse.probes.clients import CHUNK_600MS, config, now, open_ws
from bench.abuse.probes.context import Context
from bench.abuse.probes.loop import drain
from bench.abuse.probes.memory import LONG_ENV, MAX_FRAME_BYTES
from bench.abuse.probes.model import Measured, Probe, Verdict
from bench.abuse.probes.places import REALTIME
from bench.common.messages import END
from gateway.limits.session_limits import MAX_EMPTY_UTTERANCES

BYTES_PER_SECOND = 32000
MAX_APPEND_PCM16 = MAX_FRAME_BYTES  # 32.8 s at 16 kHz: the most audio an append may carry
UNTIL_CLOSED_S = 120.0  # the session's whole audio is the point: longer than --seconds


async def _max_audio(ctx: Context, path: str, first: list[str], frame: str | bytes) -> Attack:
    tally = ctx.tally
    audio_per_frame = (
        CHUNK_600MS if isinstance(frame, bytes) else MAX_APPEND_PCM16
    ) / BYTES_PER_SECOND
    ws = await open_ws(ctx.url(path), ctx.source(100), tally)
    tally.hold()
    sent = 0
    started = now()
    async with asyncio.TaskGroup() as group:
        group.create_task(drain(ws))  # only the workers pace the sender
        with contextlib.suppress(ConnectionClosed):
            for message in first:
                await ws.send(message)
            while now() - started < UNTIL_CLOSED_S:
                await ws.send(frame)
                sent += 1
        if not ws.closed:
            ws.abort()
    seconds = now() - started
    tally.release(seconds)
    tally.outcome(f"close {ws.code}")
    tally.figures["reason"] = ws.reason
    audio_s = sent * audio_per_frame
    tally.figures.update(audio_s=round(audio_s), rt=round(audio_s / seconds))
    tally.note = (
        f"one session sent {audio_s:.0f} s of audio in {seconds:.1f} s ({audio_s / seconds:.0f}x"
        f" real time) before {'its close' if ws.code != 1006 else 'the probe stopped'}"
    )
    return tally.frozen(seconds)


async def _max_audio_funasr(ctx: Context) -> Attack:
    return await _max_audio(ctx, "/", [config()], bytes(CHUNK_600MS))


async def _max_audio_realtime(ctx: Context) -> Attack:
    update = {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}
            },
        },
    }
    audio = base64.b64encode(bytes(range(256)) * (MAX_APPEND_PCM16 // 256)).decode()
    append = json.dumps({"type": "input_audio_buffer.append", "audio": audio})
    return await _max_audio(ctx, REALTIME, [json.dumps(update)], append)


def _max_audio_judge(measured: Measured) -> Verdict:
    limit = measured.setting("ASR_MAX_SESSION_SECONDS")
    audio = float(measured.attack.figures["audio_s"])
    reason = str(measured.attack.figures["reason"])
    closed = measured.attack.outcomes.get("close 1008", 0) and "ASR_MAX_SESSION_SECONDS" in reason
    cpu_per_hour = measured.footprint.cpu_s / max(1.0, audio) * 3600
    return Verdict(
        bool(closed),
        f"closed with 1008 ({reason!r}) once past {limit:g} s; the client had sent"
        f" {audio:.0f} s (the rest in flight, never taken); the gateway spent"
        f" {cpu_per_hour:.1f} s of CPU per audio hour, victims included",
    )


async def _empty_utterances(ctx: Context) -> Attack:
    """Connections one after another for ``ctx.seconds``, each sending config-and-end
    pairs without audio as fast as it reads their finals, until the server closes it."""
    tally = ctx.tally
    started = now()
    per_session: list[int] = []
    while now() - started < ctx.seconds:
        ws = await open_ws(ctx.url(), ctx.source(101), tally)
        tally.hold()
        count = 0
        with contextlib.suppress(ConnectionClosed):
            while count <= 4 * MAX_EMPTY_UTTERANCES:
                await ws.send(config())
                await ws.send(END)
                frame = await ws.json(timeout=5)
                if frame is None or frame.get("type") == "error":
                    break
                count += 1
        code = await ws.until_closed(5)
        tally.outcome(f"close {code}")
        tally.release(now() - ws.opened_at)
        per_session.append(count)
        if code is None:
            await ws.aclose()
    seconds = now() - started
    tally.figures.update(
        sessions=len(per_session),
        most_per_session=max(per_session),
        utterances_per_s=round(sum(per_session) / seconds, 1),
    )
    tally.note = (
        f"{len(per_session)} sessions one after another, each served {max(per_session)} empty"
        f" utterances at most: {sum(per_session) / seconds:.0f} worker streams opened a second"
    )
    return tally.frozen(seconds)


def _empty_judge(measured: Measured) -> Verdict:
    most = int(measured.attack.figures["most_per_session"])
    return Verdict(
        most <= MAX_EMPTY_UTTERANCES,
        f"at most {most} empty utterances served per session against {MAX_EMPTY_UTTERANCES};"
        " nothing bounds sessions one after another (each a handshake)",
    )


PROBES = [
    Probe(
        "max-audio",
        "a worker's time",
        "/",
        "one session sending 600 ms frames unpaced, results read",
        "ASR_MAX_SESSION_SECONDS of audio (3600 here: the default)",
        _max_audio_funasr,
        _max_audio_judge,
        LONG_ENV,
    ),
    Probe(
        "max-audio-realtime",
        "a worker's time",
        "/v1/realtime",
        "one session sending 32.8 s appends (16 kHz) unpaced, events read",
        "ASR_MAX_SESSION_SECONDS of audio (3600 here: the default)",
        _max_audio_realtime,
        _max_audio_judge,
        LONG_ENV,
    ),
    Probe(
        "empty-utterances",
        "a worker's time",
        "/",
        "configs and ends with no audio, unpaced, connection after connection",
        f"{MAX_EMPTY_UTTERANCES} empty utterances a session (gateway.limits); 1008",
        _empty_utterances,
        _empty_judge,
    ),
]
