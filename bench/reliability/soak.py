"""Soak: many sessions opened and closed, some abandoned, then a check for leaks.

Starts ``uvicorn gateway.app:app`` (checksum engine unless ``--env`` says otherwise), warms
it up, takes a snapshot of what the server holds, runs ``--sessions`` sessions at
``--concurrency``, waits until the server says it holds no session, stream, slot or worker
state, and takes the snapshot again. Compared: open file descriptors and threads of the
server and its workers, ``/dev/shm`` segments, RSS. Every session that runs to its end must
verify its checksum. Each session, at random:

- ``complete``: a whole utterance, then a normal close;
- ``abort``: part of an utterance, then the TCP connection is cut (no close frame);
- ``close``: part of an utterance, then a normal close without ending the utterance;
- ``two``: two utterances on one connection.

    python -m bench.reliability.soak --sessions 1000 --concurrency 12 --max-audio 5

Exit status 0 when nothing leaked and every completed session verified, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import websockets

from bench.common import procfs
from bench.common.audio import checksum
from bench.common.gateway import Gateway, served
from bench.common.report import header

SAMPLE_RATE = 16000
CHUNK_BYTES = 19200  # 600 ms, the default config's model chunk
FRAME_BYTES = 1920  # 60 ms, FunASR's framing
KINDS = ("complete", "abort", "close", "two")
KIND_WEIGHTS = (0.6, 0.15, 0.15, 0.1)
# What may differ between two snapshots without being a leak.
RSS_GROWTH_LIMIT_MIB = 32.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    fds: int
    threads: int
    rss_mib: float
    shm_segments: int
    sessions: int
    streams: int
    engine_streams: int
    free_slots: int
    workers: int


@dataclass
class SoakReport:
    sessions: int
    by_kind: dict[str, int]
    verified: int
    failures: list[str]
    seconds: float
    before: Snapshot
    after: Snapshot
    rss_samples_mib: list[float] = field(default_factory=list)

    @property
    def leaks(self) -> list[str]:
        before, after = self.before, self.after
        found = []
        if after.fds > before.fds:
            found.append(f"file descriptors {before.fds} -> {after.fds}")
        if after.threads > before.threads:
            found.append(f"threads {before.threads} -> {after.threads}")
        if after.shm_segments != before.shm_segments:
            found.append(f"/dev/shm segments {before.shm_segments} -> {after.shm_segments}")
        if after.rss_mib - before.rss_mib > RSS_GROWTH_LIMIT_MIB:
            found.append(f"RSS {before.rss_mib:.0f} -> {after.rss_mib:.0f} MiB")
        if after.sessions or after.streams or after.engine_streams:
            found.append("sessions or streams still held")
        if after.free_slots != before.free_slots or after.workers != before.workers:
            found.append(f"free slots {before.free_slots} -> {after.free_slots}")
        return found

    @property
    def ok(self) -> bool:
        return not self.leaks and not self.failures


def snapshot(gateway: Gateway) -> Snapshot:
    """What the server process and its workers hold now."""
    pids = procfs.family(gateway.pid)
    # Counted before asking /readyz: the server closes that request's socket only after
    # answering it, so counting after would race with it and see one descriptor too many.
    # The multiprocessing resource tracker is a child too; it is counted like the workers.
    fds = sum(procfs.descriptors(pid) for pid in pids)
    threads = sum(procfs.threads(pid) for pid in pids)
    rss_mib = sum(procfs.rss_mib(pid) for pid in pids)
    status = gateway.readyz()
    workers = status["workers"]
    return Snapshot(
        fds=fds,
        threads=threads,
        rss_mib=rss_mib,
        shm_segments=sum(
            1 for name in os.listdir("/dev/shm") if name.startswith(f"asrgw_{gateway.pid}_")
        ),
        sessions=status["sessions"]["active"],
        streams=sum(w["active_streams"] for w in workers),
        engine_streams=sum(w["engine_streams"] for w in workers),
        free_slots=sum(w["free_slots"] for w in workers),
        workers=len(workers),
    )


async def settled_snapshot(gateway: Gateway, before: Snapshot) -> Snapshot:
    """A snapshot, retaken for a few seconds while it shows more descriptors or threads than
    ``before``: a socket the server is still closing (the last aborted client's, our own
    /readyz request's) is not a leak, and a leak does not go away."""
    after = snapshot(gateway)
    for _ in range(10):
        if after.fds <= before.fds and after.threads <= before.threads:
            break
        await asyncio.sleep(0.5)
        after = snapshot(gateway)
    return after


async def wait_quiet(gateway: Gateway, timeout: float = 30.0) -> None:
    """Until the server holds no session, stream or worker state and every slot is free.

    The workers report their state about once a second, so this waits at least that long.
    """
    deadline = time.monotonic() + timeout
    await asyncio.sleep(1.5)
    while time.monotonic() < deadline:
        status = await asyncio.to_thread(gateway.readyz)
        workers = status["workers"]
        if (
            status["sessions"]["active"] == 0
            and all(w["state"] == "ready" for w in workers)
            and all(w["active_streams"] == 0 and w["engine_streams"] == 0 for w in workers)
        ):
            return
        await asyncio.sleep(0.25)
    raise TimeoutError("the server still holds sessions or streams")


async def one_session(
    url: str, index: int, kind: str, max_audio_s: float, fast: bool, failures: list[str]
) -> bool:
    """Run one session of ``kind``; True when it ran to the end and verified."""
    rng = random.Random(index)
    utterances = 2 if kind == "two" else 1
    try:
        async with websockets.connect(
            url,
            subprotocols=[websockets.Subprotocol("binary")],
            compression=None,
            max_size=None,
            open_timeout=30,
        ) as ws:
            for _ in range(utterances):
                samples = rng.randint(SAMPLE_RATE // 10, int(max_audio_s * SAMPLE_RATE))
                pcm = rng.randbytes(2 * samples)
                if kind in ("abort", "close"):
                    pcm = pcm[: rng.randrange(0, len(pcm) + 1, 2)]  # stop part way
                config = {"mode": "online", "chunk_size": [5, 10, 5], "wav_name": f"s{index}"}
                await ws.send(json.dumps(config))
                started = time.perf_counter()
                for offset in range(0, len(pcm), FRAME_BYTES):
                    if not fast:
                        due = started + offset / 2 / SAMPLE_RATE
                        await asyncio.sleep(max(0.0, due - time.perf_counter()))
                    await ws.send(pcm[offset : offset + FRAME_BYTES])
                if kind == "abort":
                    assert ws.transport is not None
                    ws.transport.abort()
                    return False
                if kind == "close":
                    return False  # leaving the ``async with`` closes normally, mid-utterance
                await ws.send(json.dumps({"is_speaking": False}))
                while True:
                    message = json.loads(await asyncio.wait_for(ws.recv(), 30))
                    if message.get("type") == "error":
                        raise RuntimeError(f"{message['code']}: {message['message']}")
                    if message["is_final"]:
                        break
                if message["text"] != checksum(pcm):
                    raise RuntimeError(f"final {message['text']} != {checksum(pcm)}")
            return True
    except Exception as exc:
        failures.append(f"session {index} ({kind}): {type(exc).__name__}: {exc}")
        return False


async def run_sessions(
    gateway: Gateway, args: argparse.Namespace
) -> tuple[dict[str, int], int, list[str], list[float]]:
    rng = random.Random(args.seed)
    kinds = rng.choices(KINDS, KIND_WEIGHTS, k=args.sessions)
    by_kind = {kind: kinds.count(kind) for kind in KINDS}
    failures: list[str] = []
    verified = 0
    done = 0
    rss_samples: list[float] = []
    limit = asyncio.Semaphore(args.concurrency)

    async def guarded(index: int) -> None:
        nonlocal verified, done
        async with limit:
            ok = await one_session(
                gateway.url, index, kinds[index], args.max_audio, args.fast, failures
            )
        verified += ok
        done += 1
        if not args.quiet:
            print(f"\r{done}/{args.sessions} sessions", end="", file=sys.stderr, flush=True)

    async def sample_rss() -> None:
        while True:
            rss_samples.append(snapshot(gateway).rss_mib)
            await asyncio.sleep(args.sample_interval)

    sampler = asyncio.create_task(sample_rss())
    try:
        async with asyncio.TaskGroup() as group:
            for index in range(args.sessions):
                group.create_task(guarded(index))
    finally:
        sampler.cancel()
    if not args.quiet:
        print(file=sys.stderr)
    return by_kind, verified, failures, rss_samples


async def soak(args: argparse.Namespace) -> SoakReport:
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu", **dict(args.env)}
    gateway = served(env)
    try:
        url = gateway.url
        # Warm-up: first sessions allocate what every later one reuses.
        warm_failures: list[str] = []
        for index in range(4):
            await one_session(url, -1 - index, "complete", 1.0, True, warm_failures)
        await wait_quiet(gateway)
        before = snapshot(gateway)
        started = time.perf_counter()
        by_kind, verified, failures, rss = await run_sessions(gateway, args)
        seconds = time.perf_counter() - started
        await wait_quiet(gateway)
        after = await settled_snapshot(gateway, before)
        return SoakReport(
            args.sessions, by_kind, verified, warm_failures + failures, seconds, before, after, rss
        )
    finally:
        gateway.stop()


def markdown(report: SoakReport) -> str:
    before, after = report.before, report.after
    rows = [
        ("open file descriptors (server + workers)", before.fds, after.fds),
        ("threads (server + workers)", before.threads, after.threads),
        ("RSS MiB (server + workers)", f"{before.rss_mib:.1f}", f"{after.rss_mib:.1f}"),
        ("/dev/shm segments", before.shm_segments, after.shm_segments),
        ("live sessions", before.sessions, after.sessions),
        ("pool streams", before.streams, after.streams),
        ("decoder states in workers", before.engine_streams, after.engine_streams),
        ("free slots", before.free_slots, after.free_slots),
    ]
    completed = report.by_kind["complete"] + report.by_kind["two"]
    lines = [
        f"{report.sessions} sessions in {report.seconds:.0f} s ("
        + ", ".join(f"{kind} {n}" for kind, n in report.by_kind.items())
        + f"); {report.verified} of {completed} run to the end verified;"
        f" {len(report.failures)} failures",
        "",
        *header("held by the server", "before", "after"),
        *(f"| {name} | {b} | {a} |" for name, b, a in rows),
    ]
    if report.rss_samples_mib:
        samples = report.rss_samples_mib
        quarters = [samples[min(len(samples) - 1, len(samples) * q // 4)] for q in range(5)]
        lines += [
            "",
            "RSS MiB during the run (0/25/50/75/100 %): "
            + " / ".join(f"{value:.0f}" for value in quarters),
        ]
    leaks = report.leaks
    lines += ["", "leaks: " + ("; ".join(leaks) if leaks else "none")]
    if report.failures:
        lines += ["failures: " + "; ".join(report.failures[:5])]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reliability.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--max-audio", type=float, default=5.0, help="seconds per utterance")
    parser.add_argument("--fast", action="store_true", help="send audio without pacing")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sample-interval", type=float, default=5.0, help="RSS sampling, s")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        type=lambda text: tuple(text.split("=", 1)),
        help="VAR=VALUE for the gateway (repeatable)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> SoakReport:
    return asyncio.run(soak(args))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {**asdict(report), "leaks": report.leaks}
        args.json.write_text(json.dumps(payload, indent=1))
    print(markdown(report))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
