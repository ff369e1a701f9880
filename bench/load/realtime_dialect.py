"""The cost of the dialects: the same sessions through FunASR's endpoint (``/``), OpenAI's
Realtime transcription endpoint (``/v1/realtime?intent=transcription``) and Deepgram's live
endpoint (``/v1/listen``) of one gateway (checksum engine), one endpoint after the other,
the order turned each round (``--endpoints`` picks them; the first is the baseline).

Both endpoints get the same audio (synthetic, 16 kHz) in 100 ms frames paced in real time,
from the same client (``websockets``, asyncio, no compression), each session started at
its own phase of one model chunk:

- FunASR: a config (online, chunk_size [5, 10, 5], timing), binary PCM frames, the end;
- OpenAI: ``session.update`` (``audio/pcm`` at ``--rate``, ``turn_detection: null``),
  one ``input_audio_buffer.append`` per frame, ``input_audio_buffer.commit``. At 16 kHz
  (the default) the gateway resamples nothing: the difference is the dialect alone (JSON
  and base64 per append, one JSON parse and one event built per result). ``--rate 24000``
  (OpenAI's default rate; the same audio resampled here, ahead of time) adds the gateway's
  resampling;
- Deepgram: the query (``linear16`` at 16 kHz, ``interim_results``, ``endpointing=false``),
  binary PCM frames, ``CloseStream``: the difference is the dialect's own (the endpointer it
  runs on the audio, its words and ``Results`` per result).

Every frame is made ahead of time (the appends' base64 and JSON too), so that the client
does the same per frame for both endpoints: one send of prepared bytes, as a text frame
for OpenAI, then a JSON parse of each server frame. Per endpoint it reports:

- per-chunk latency: the last byte of 600 ms model chunk k sent -> its result (FunASR: the
  result with ``seq`` k; OpenAI: the item's k-th delta; Deepgram: the k-th interim);
- final latency: the end, the commit or ``CloseStream`` sent -> the final result
  (``is_final``), ``...input_audio_transcription.completed`` or the final ``Results``;
- CPU seconds per hour of audio of the gateway process alone (uvicorn: the event loop and
  its threads) and of its workers (the same work for both endpoints), from /proc, and of
  this client;
- errors, and verification: the final result (FunASR, Deepgram) or the last delta (OpenAI) must be
  the checksum of all the audio the pool got, after one result for every whole chunk.

It is a cost comparison, not a capacity test: the defaults keep the gateway process at a
few per cent of one core of two (printed with the results), so queueing adds nothing.

    python -m bench.load.realtime_dialect --sessions 20 --seconds 20 --rounds 3
    python -m bench.load.realtime_dialect --endpoints funasr,openai --rate 24000
    python -m bench.load.realtime_dialect --endpoints funasr,deepgram
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common.audio import load_audio
from bench.common.gateway import serve
from bench.common.procfs import cpu_seconds, parent
from bench.common.report import header
from bench.common.stats import Distribution, distribution
from bench.load.realtime_sessions import (
    CHUNK_SAMPLES,
    ENDPOINTS,
    FRAME_S,
    FRAMES_PER_CHUNK,
    SAMPLE_RATE,
    Endpoint,
    Plan,
    SessionRecord,
    plans,
    run_session,
)
from shared.gc_tuning import latency_tuned_gc

SETTLE_S = 0.5  # after the last session: the gateway's teardown counts in its CPU


@dataclass(frozen=True, slots=True)
class LoadRun:
    """One endpoint's load in one round."""

    endpoint: Endpoint
    round: int
    sessions: int
    errors: int
    verified: int
    audio_seconds: float
    wall_seconds: float
    gateway_cpu_s: float
    workers_cpu_s: float
    client_cpu_s: float
    chunk_latencies_ms: list[float]
    final_latencies_ms: list[float]
    error_samples: list[str]


@dataclass(frozen=True, slots=True)
class EndpointSummary:
    endpoint: Endpoint
    sessions: int
    errors: int
    verified: int
    chunk_latency_ms: Distribution
    final_latency_ms: Distribution
    gateway_cpu_s_per_audio_h: float
    workers_cpu_s_per_audio_h: float
    client_cpu_s_per_audio_h: float
    gateway_core_share: float  # the gateway process's CPU over the loads' wall time
    gateway_cpu_s_per_audio_h_by_round: list[float]


# -- sessions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """The gateway under test: its FunASR URL and the processes whose CPU is counted."""

    url: str
    gateway_pid: int | None
    worker_pids: tuple[int, ...]

    def cpu(self) -> tuple[float, float]:
        """CPU seconds so far of the gateway process and of its workers (nan: not here)."""
        gateway = cpu_seconds(self.gateway_pid) if self.gateway_pid else float("nan")
        try:
            workers = sum(cpu_seconds(pid) for pid in self.worker_pids)
        except OSError:
            workers = float("nan")
        return gateway, workers


async def load(
    target: Target, plans: list[Plan], sessions: int, round_: int, args: argparse.Namespace
) -> LoadRun:
    """``sessions`` at once, started evenly over one model chunk (every phase of it)."""
    records = [SessionRecord() for _ in range(sessions)]
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    ramp = FRAMES_PER_CHUNK * FRAME_S

    async def one(index: int) -> None:
        await asyncio.sleep(ramp * index / sessions)
        await run_session(plans[index % len(plans)], records[index], args.timeout, headers)

    gateway_before, workers_before = target.cpu()
    client_before = time.process_time()
    started = time.perf_counter()
    bound = max(p.audio_seconds for p in plans) + ramp + 2 * args.timeout
    try:
        async with asyncio.timeout(bound), asyncio.TaskGroup() as group:
            for index in range(sessions):
                group.create_task(one(index))
    except TimeoutError:
        for record in records:
            if record.final_s is None and record.error is None:
                record.error = "no final result before the run's time bound"
    await asyncio.sleep(SETTLE_S)
    gateway_after, workers_after = target.cpu()
    endpoint = plans[0].endpoint
    problems = {
        r.error or f"not verified: {r.results} results, the last {r.last_text}"
        for r in records
        if r.error is not None or not r.verified
    }
    return LoadRun(
        endpoint=endpoint,
        round=round_,
        sessions=sessions,
        errors=sum(r.error is not None for r in records),
        verified=sum(r.verified for r in records),
        audio_seconds=sum(plans[i % len(plans)].audio_seconds for i in range(sessions)),
        wall_seconds=time.perf_counter() - started,
        gateway_cpu_s=gateway_after - gateway_before,
        workers_cpu_s=workers_after - workers_before,
        client_cpu_s=time.process_time() - client_before,
        chunk_latencies_ms=[1000 * x for r in records for x in r.chunk_latencies_s],
        final_latencies_ms=[1000 * r.final_s for r in records if r.final_s is not None],
        error_samples=sorted(problems)[:3],
    )


def summarize(endpoint: Endpoint, runs: list[LoadRun]) -> EndpointSummary:
    mine = [r for r in runs if r.endpoint == endpoint]
    per_h = 3600 / sum(r.audio_seconds for r in mine)
    return EndpointSummary(
        endpoint=endpoint,
        sessions=sum(r.sessions for r in mine),
        errors=sum(r.errors for r in mine),
        verified=sum(r.verified for r in mine),
        chunk_latency_ms=distribution([x for r in mine for x in r.chunk_latencies_ms]),
        final_latency_ms=distribution([x for r in mine for x in r.final_latencies_ms]),
        gateway_cpu_s_per_audio_h=sum(r.gateway_cpu_s for r in mine) * per_h,
        workers_cpu_s_per_audio_h=sum(r.workers_cpu_s for r in mine) * per_h,
        client_cpu_s_per_audio_h=sum(r.client_cpu_s for r in mine) * per_h,
        gateway_core_share=sum(r.gateway_cpu_s for r in mine) / sum(r.wall_seconds for r in mine),
        gateway_cpu_s_per_audio_h_by_round=[
            round(r.gateway_cpu_s * 3600 / r.audio_seconds, 1) for r in mine
        ],
    )


def markdown(args: argparse.Namespace, summaries: list[EndpointSummary]) -> str:
    baseline = summaries[0]

    def values(s: EndpointSummary) -> list[float]:
        c, f = s.chunk_latency_ms, s.final_latency_ms
        return [
            *(c.p50, c.p95, c.p99, f.p50, f.p95, f.p99),
            *(s.gateway_cpu_s_per_audio_h, s.workers_cpu_s_per_audio_h),
            s.client_cpu_s_per_audio_h,
        ]

    shares = ", ".join(f"{100 * s.gateway_core_share:.1f}% ({s.endpoint})" for s in summaries)
    lines = [
        f"{args.sessions} sessions x {args.seconds:g} s of audio, {args.rounds} round(s), the"
        " endpoints' order turned each round; 100 ms frames in real time; OpenAI appends at"
        f" {args.rate} Hz (base64 and JSON made ahead of time); no compression. Gateway"
        f" process at {shares} of one core.",
        "",
        *header(
            "endpoint",
            "sessions",
            "errors",
            "verified",
            "chunk p50 ms",
            "chunk p95 ms",
            "chunk p99 ms",
            "final p50 ms",
            "final p95 ms",
            "final p99 ms",
            "gateway CPU s/audio h",
            "workers CPU s/audio h",
            "client CPU s/audio h",
        ),
    ]
    for s in summaries:
        numbers = " | ".join(f"{v:.1f}" for v in values(s))
        lines.append(f"| {s.endpoint} | {s.sessions} | {s.errors} | {s.verified} | {numbers} |")
    for s in summaries[1:]:
        difference = [b - a for a, b in zip(values(baseline), values(s), strict=True)]
        numbers = " | ".join(f"{v:+.1f}" for v in difference)
        lines.append(f"| {s.endpoint} - {baseline.endpoint} | | | | {numbers} |")
    lines.append("")
    lines.append(
        "gateway CPU s/audio h by round: "
        + "; ".join(
            f"{s.endpoint} {', '.join(f'{v:.1f}' for v in s.gateway_cpu_s_per_audio_h_by_round)}"
            f" (median {statistics.median(s.gateway_cpu_s_per_audio_h_by_round):.1f})"
            for s in summaries
        )
    )
    return "\n".join(lines)


# -- the gateway -----------------------------------------------------------------------------


def _worker_pids(http: str) -> tuple[int, ...]:
    with urllib.request.urlopen(f"{http}/readyz", timeout=5) as response:
        return tuple(int(w["pid"]) for w in json.load(response).get("workers", []))


def _parent_pid(pid: int) -> int | None:
    try:
        return parent(pid)
    except OSError:
        return None  # not on this machine


@asynccontextmanager
async def gateway(args: argparse.Namespace) -> AsyncIterator[Target]:
    """``--url``'s gateway (its process: the workers' parent, if they run here), or
    ``uvicorn gateway.app:app`` of our own on the checksum engine."""
    if args.url is not None:
        url = args.url.rstrip("/") + "/"
        workers = _worker_pids(url.replace("ws", "http", 1).rstrip("/"))
        yield Target(url, _parent_pid(workers[0]) if workers else None, workers)
        return
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_MAX_SESSIONS": str(max(64, 2 * args.sessions)),
    }
    with tempfile.TemporaryDirectory() as logs:
        async with serve(env, Path(logs) / "gateway.log") as server:
            yield Target(server.url, server.pid, server.worker_pids())


async def measure(args: argparse.Namespace) -> list[LoadRun]:
    seeds = range(min(args.sessions, 4))
    audios = [load_audio(None, args.seconds, seed) for seed in seeds]
    runs: list[LoadRun] = []
    async with gateway(args) as target:
        endpoints = args.endpoints
        made = {e: plans(e, target.url, audios, args.rate) for e in endpoints}
        # The first sessions pay for imports and first-use allocations (soxr at 24 kHz).
        first_chunk = [audios[0][:CHUNK_SAMPLES]]
        warm = {e: plans(e, target.url, first_chunk, args.rate) for e in endpoints}
        for endpoint in endpoints:
            await load(target, warm[endpoint], 2, -1, args)
        for round_ in range(args.rounds):
            # Turned, so that no endpoint always runs on a warmer machine.
            shift = round_ % len(endpoints)
            order = endpoints[shift:] + endpoints[:shift]
            for endpoint in order:
                runs.append(await load(target, made[endpoint], args.sessions, round_, args))
                if not args.quiet:
                    run = runs[-1]
                    print(
                        f"round {round_} {endpoint}: {run.errors} errors, gateway CPU"
                        f" {run.gateway_cpu_s:.2f} s in {run.wall_seconds:.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    return runs


def _endpoints(text: str) -> tuple[Endpoint, ...]:
    chosen = tuple(e.strip() for e in text.split(",") if e.strip())
    unknown = [e for e in chosen if e not in ENDPOINTS]
    if unknown or len(set(chosen)) < 2 or len(set(chosen)) != len(chosen):
        raise argparse.ArgumentTypeError(f"two or more of {', '.join(ENDPOINTS)}, once each")
    return chosen  # type: ignore[return-value]  # checked against ENDPOINTS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load.realtime_dialect",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", help="a running gateway (default: start one, checksum engine)")
    parser.add_argument("--sessions", type=int, default=20, help="concurrent, per endpoint")
    parser.add_argument("--seconds", type=float, default=20.0, help="audio per session")
    parser.add_argument("--rounds", type=int, default=3, help="each endpoint once a round")
    parser.add_argument(
        "--endpoints",
        type=_endpoints,
        default=ENDPOINTS,
        help="comma-separated, the baseline first (default: funasr,openai,deepgram)",
    )
    parser.add_argument("--rate", type=int, default=SAMPLE_RATE, help="the OpenAI appends' Hz")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-message timeout")
    parser.add_argument("--api-key", help="for --url's gateway with ASR_API_KEYS")
    parser.add_argument("--json", type=Path, help="write the summaries and every run here")
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The generator's own collector pauses would show up as the server's latency.
    with latency_tuned_gc():
        runs = asyncio.run(measure(args))
    summaries = [summarize(endpoint, runs) for endpoint in args.endpoints]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "summaries": [asdict(s) for s in summaries],
            "runs": [asdict(r) for r in runs],
        }
        args.json.write_text(json.dumps(payload, indent=1))
    print(markdown(args, summaries))
    for run in runs:
        for sample in run.error_samples:
            print(f"round {run.round} {run.endpoint}: {sample}", file=sys.stderr)
    failed = sum(s.errors for s in summaries) or sum(s.sessions - s.verified for s in summaries)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
