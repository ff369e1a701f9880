"""The HTTP endpoints and the agent port: uploads held open at the size cap, status
endpoints scraped in a loop, the agent port probed in a loop."""

from __future__ import annotations

import asyncio
import contextlib
import struct

from bench.abuse.probes.attack import Attack
from bench.abuse.probes.clients import Http, now
from bench.abuse.probes.context import Context
from bench.abuse.probes.model import AttackFn, Measured, Probe, Verdict
from shared.settings_table import TRANSCRIBE_CONCURRENCY, TRANSCRIBE_MAX_BYTES

CONCURRENCY = TRANSCRIBE_CONCURRENCY.default
MAX_BYTES = TRANSCRIBE_MAX_BYTES.default
BOUNDARY = "probeboundary"
CHUNK = 1 << 20
RETAINED_AFTER_S = 2.0  # after the last answer: what the gateway still holds then


def _wav_header(data_bytes: int) -> bytes:
    """A 16 kHz mono 16-bit PCM WAV header declaring ``data_bytes`` of samples."""
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data_bytes)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16)
        + b"data"
        + struct.pack("<I", data_bytes)
    )


def _part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value


def _request(path: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n"
        f"content-type: multipart/form-data; boundary={BOUNDARY}\r\n\r\n"
    ).encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def holding_uploads(path: str, fields: dict[str, str]) -> AttackFn:
    """``CONCURRENCY + 1`` chunked uploads of a WAV file part just under
    ASR_TRANSCRIBE_MAX_BYTES, sent at once and never finished, so that each waits for
    ASR_UPLOAD_TIMEOUT with the whole file in memory; an honest upload meanwhile."""

    async def attack(ctx: Context) -> Attack:
        tally = ctx.tally
        started = now()
        statuses: list[int] = []
        size = MAX_BYTES - 64 * 1024

        async def one(index: int) -> None:
            http = await Http.open(ctx.port, ctx.source(110 + index), tally)
            tally.hold()
            opened = now()
            try:
                await http.write(_request(path))
                head = b"".join(_part(k, v.encode()) + b"\r\n" for k, v in fields.items())
                await http.write(_chunk(head + _part("file", _wav_header(size), "a.wav")))
                for _ in range(size // CHUNK):
                    await http.write(_chunk(bytes(CHUNK)))
                status, _ = await asyncio.wait_for(http.response(), 60)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as exc:
                status = 0
                tally.outcome(type(exc).__name__)
            statuses.append(status)
            tally.outcome(f"HTTP {status}")
            tally.release(now() - opened)
            await http.aclose()

        async def honest() -> None:
            await asyncio.sleep(2.0)  # the others are sending their files by now
            http = await Http.open(ctx.port, ctx.source(120), tally)
            wav = _wav_header(32000) + bytes(32000)
            body = _part("file", wav, "b.wav") + f"\r\n--{BOUNDARY}--\r\n".encode()
            await http.write(_request(path) + _chunk(body) + b"0\r\n\r\n")
            status, _ = await http.response()
            tally.figures["honest_status"] = status
            await http.aclose()

        rss = ctx.gateway.rss_mib()
        async with asyncio.TaskGroup() as group:
            for index in range(CONCURRENCY + 1):
                group.create_task(one(index))
            group.create_task(honest())
        await asyncio.sleep(RETAINED_AFTER_S)
        tally.figures.update(
            file_mib=round(size / 2**20, 1),
            uploads=CONCURRENCY + 1,
            retained_mib=round(ctx.gateway.rss_mib() - rss, 1),
        )
        tally.note = (
            f"{CONCURRENCY + 1} uploads of {size / 2**20:.0f} MiB, never finished: statuses"
            f" {sorted(statuses)}; an honest 1 s upload meanwhile got"
            f" {tally.figures.get('honest_status')}"
        )
        return tally.frozen(now() - started)

    return attack


def _uploads_judge(measured: Measured) -> Verdict:
    timeout = measured.setting("ASR_UPLOAD_TIMEOUT")
    longest = max(measured.attack.held_s, default=0.0)
    cap_mib = float(measured.attack.figures["file_mib"])
    per_upload = measured.footprint.rss_growth_mib / CONCURRENCY
    retained = float(measured.attack.figures["retained_mib"])
    holds = longest <= timeout + 2 and per_upload <= cap_mib * 1.3 + 4 and retained <= 16
    return Verdict(
        holds,
        f"held at most {longest:.1f} s against ASR_UPLOAD_TIMEOUT {timeout:g} s;"
        f" {per_upload:.0f} MiB of RSS per upload held against a {cap_mib:.0f} MiB file"
        f" ({CONCURRENCY} at once: ASR_TRANSCRIBE_CONCURRENCY); still {retained:+.0f} MiB"
        f" {RETAINED_AFTER_S:g} s after the last refusal",
    )


def refused_uploads(path: str, fields: dict[str, str]) -> AttackFn:
    """Rounds of ``CONCURRENCY`` chunked uploads 2 MiB over ASR_TRANSCRIBE_MAX_BYTES, each
    refused with 413 when its count passes the cap, for ``ctx.seconds``: what the gateway
    holds after each round, once every refusal is answered."""

    async def attack(ctx: Context) -> Attack:
        tally = ctx.tally
        started = now()
        rss = ctx.gateway.rss_mib()
        size = MAX_BYTES + 2 * CHUNK
        after: list[float] = []

        async def one(index: int) -> None:
            http = await Http.open(ctx.port, ctx.source(150 + index), tally)
            opened = now()
            tally.hold()
            head = b"".join(_part(k, v.encode()) + b"\r\n" for k, v in fields.items())
            with contextlib.suppress(OSError):  # the server answers before it has it all
                await http.write(_request(path))
                await http.write(_chunk(head + _part("file", _wav_header(size), "a.wav")))
                for _ in range(size // CHUNK):
                    await http.write(_chunk(bytes(CHUNK)))
            status, _ = await asyncio.wait_for(http.response(), 30)
            tally.outcome(f"HTTP {status}")
            tally.release(now() - opened)
            await http.aclose()

        while now() - started < ctx.seconds:
            async with asyncio.TaskGroup() as group:
                for index in range(CONCURRENCY):
                    group.create_task(one(index))
            await asyncio.sleep(0.5)
            after.append(ctx.gateway.rss_mib() - rss)
        await asyncio.sleep(RETAINED_AFTER_S)
        retained = ctx.gateway.rss_mib() - rss
        refused = sum(tally.outcomes.values())
        tally.figures.update(
            rounds=len(after),
            refused=refused,
            retained_mib=round(retained, 1),
            retained_mib_per_refusal=round(retained / max(1, refused), 1),
        )
        series = ", ".join(f"{mib:+.0f}" for mib in after)
        tally.note = (
            f"{len(after)} rounds of {CONCURRENCY} uploads of {size / 2**20:.0f} MiB, each"
            f" refused: the gateway's RSS after each round {series} MiB, {retained:+.0f} MiB"
            f" {RETAINED_AFTER_S:g} s after the last"
        )
        return tally.frozen(now() - started)

    return attack


def _refused_judge(measured: Measured) -> Verdict:
    retained = float(measured.attack.figures["retained_mib"])
    per = float(measured.attack.figures["retained_mib_per_refusal"])
    refused = int(measured.attack.figures["refused"])
    return Verdict(
        retained <= 16,
        f"{retained:+.0f} MiB still held after {refused} refused uploads ({per:.1f} MiB each),"
        f" against {MAX_BYTES / 2**20:.0f} MiB per upload in flight and nothing after"
        " (README: memory stays bounded by the cap)",
    )


def scraping(path: str, connections: int = 2) -> AttackFn:
    """``connections`` keep-alive connections GETting ``path`` as fast as they can."""

    async def attack(ctx: Context) -> Attack:
        tally = ctx.tally
        started = now()
        counts: list[int] = []
        sizes: list[int] = []

        async def one(index: int) -> None:
            http = await Http.open(ctx.port, ctx.source(130 + index), tally)
            count = 0
            while now() - started < ctx.seconds:
                status, body = await http.get(path)
                tally.outcome(f"HTTP {status}")
                sizes.append(len(body))
                count += 1
            counts.append(count)
            await http.aclose()

        async with asyncio.TaskGroup() as group:
            for index in range(connections):
                group.create_task(one(index))
        seconds = now() - started
        tally.figures.update(requests=sum(counts), per_s=round(sum(counts) / seconds, 1))
        tally.note = (
            f"{connections} keep-alive connections: {sum(counts) / seconds:.0f} requests/s,"
            f" {sum(sizes) / max(1, len(sizes)) / 1024:.1f} KiB each"
        )
        tally.hold()
        tally.release(seconds)
        return tally.frozen(seconds)

    return attack


async def _agent(ctx: Context) -> Attack:
    """Four clients connecting to the agent port, reading its line, for ``ctx.seconds``."""
    tally = ctx.tally
    started = now()
    counts: list[int] = []

    async def one(index: int) -> None:
        count = 0
        while now() - started < ctx.seconds:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", ctx.gateway.agent_port, local_addr=(ctx.source(140 + index), 0)
            )
            tally.connections += 1
            line = await reader.readline()
            tally.received += len(line)
            tally.outcome(line.decode().strip().split(" ")[0] or "nothing")
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            count += 1
        counts.append(count)

    async with asyncio.TaskGroup() as group:
        for index in range(4):
            group.create_task(one(index))
    seconds = now() - started
    tally.figures.update(requests=sum(counts), per_s=round(sum(counts) / seconds, 1))
    tally.note = f"4 clients: {sum(counts) / seconds:.0f} agent checks/s"
    tally.hold()
    tally.release(seconds)
    return tally.frozen(seconds)


def _rate_judge(measured: Measured) -> Verdict:
    per_s = float(measured.attack.figures["per_s"])
    requests = max(1, int(measured.attack.figures["requests"]))
    ms = 1000 * measured.footprint.cpu_s / requests
    return Verdict(
        None,
        f"{per_s:.0f}/s at {ms:.2f} ms of gateway CPU each (victims included); nothing"
        " bounds the rate, and README promises nothing",
    )


UPLOADS = [
    Probe(
        "upload-hold",
        "memory",
        "POST /v1/transcribe",
        "5 chunked uploads of ~50 MiB from 5 addresses, the last chunk never sent",
        "ASR_TRANSCRIBE_MAX_BYTES x ASR_TRANSCRIBE_CONCURRENCY (_PER_CLIENT), ASR_UPLOAD_TIMEOUT",
        holding_uploads("/v1/transcribe", {}),
        _uploads_judge,
    ),
    Probe(
        "upload-hold-openai",
        "memory",
        "POST /v1/audio/transcriptions",
        "5 chunked uploads of ~50 MiB from 5 addresses, the last chunk never sent",
        "ASR_TRANSCRIBE_MAX_BYTES x ASR_TRANSCRIBE_CONCURRENCY (_PER_CLIENT), ASR_UPLOAD_TIMEOUT",
        holding_uploads("/v1/audio/transcriptions", {"model": "whisper-1"}),
        _uploads_judge,
    ),
    Probe(
        "upload-refused",
        "memory",
        "POST /v1/transcribe",
        "rounds of 4 uploads (4 addresses) just over ASR_TRANSCRIBE_MAX_BYTES (413 each)",
        "ASR_TRANSCRIBE_MAX_BYTES (413 at the cap), ASR_TRANSCRIBE_CONCURRENCY",
        refused_uploads("/v1/transcribe", {}),
        _refused_judge,
    ),
    Probe(
        "upload-refused-openai",
        "memory",
        "POST /v1/audio/transcriptions",
        "rounds of 4 uploads (4 addresses) just over ASR_TRANSCRIBE_MAX_BYTES (413 each)",
        "ASR_TRANSCRIBE_MAX_BYTES (413 at the cap), ASR_TRANSCRIBE_CONCURRENCY",
        refused_uploads("/v1/audio/transcriptions", {"model": "whisper-1"}),
        _refused_judge,
    ),
]
STATUS = [
    Probe(
        "scrape-metrics",
        "event-loop time",
        "GET /metrics",
        "2 keep-alive connections scraping as fast as they can",
        "none (ASR_PROTECT_STATUS / ASR_API_KEYS: a key)",
        scraping("/metrics"),
        _rate_judge,
    ),
    Probe(
        "scrape-readyz",
        "event-loop time",
        "GET /readyz",
        "2 keep-alive connections polling as fast as they can",
        "none",
        scraping("/readyz"),
        _rate_judge,
    ),
    Probe(
        "scrape-healthz",
        "event-loop time",
        "GET /healthz",
        "2 keep-alive connections polling as fast as they can",
        "none",
        scraping("/healthz"),
        _rate_judge,
    ),
    Probe(
        "agent-checks",
        "event-loop time",
        "agent port (ASR_AGENT_PORT)",
        "4 clients connecting, reading the line, closing, as fast as they can",
        "none (a second's send timeout per check)",
        _agent,
        _rate_judge,
    ),
]
