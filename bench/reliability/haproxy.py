"""Replicas behind HAProxy (``deploy/haproxy.cfg``, the checksum engine), three measures:

- ``signals``: how fast HAProxy reacts. A replica filled by clients that reach it directly:
  the time until its agent's weight is 0 (``agent-check``) and until its HTTP check has
  taken it out (``/readyz`` 503, ``fall 2``), at the same interval; and a SIGKILLed
  replica: the time until HAProxy marks it DOWN.
- ``cost``: the same load (``bench.load.ws_load``, real time, 600 ms chunks) straight to one
  replica and through HAProxy to that one replica (the others in maintenance): chunk
  latency, and HAProxy's CPU per audio hour against the gateway's.
- ``replicas``: the same load through HAProxy to 1 replica and to 2 (each with one
  worker): where chunk p95 stays under ``--p95-ms``, on this machine's cores.

    python -m bench.reliability.haproxy --rounds 5 --streams 100 --seconds 20 \\
        --sweep 200,400,600,800
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection, connect

from bench.common.haproxy_cluster import Cluster, haproxy_cluster
from bench.common.messages import config
from bench.common.procfs import cpu_seconds
from bench.load import ws_load

PLACES = 16
INTER_S = 0.5  # the shipped config's default


async def _fill(url: str, count: int) -> list[ClientConnection]:
    sessions = []
    for _ in range(count):
        websocket = await connect(url, compression=None)
        await websocket.send(config())
        sessions.append(websocket)
    return sessions


def _until(cluster: Cluster, name: str, field: str, value: str, since: float) -> float:
    while not cluster.servers()[name][field].startswith(value):
        time.sleep(0.005)
        assert time.monotonic() - since < 30, cluster.servers()[name]
    return time.monotonic() - since


async def signals(cluster: Cluster, rounds: int) -> dict[str, Any]:
    agent: list[float] = []
    check: list[float] = []
    killed: list[float] = []
    gw1 = cluster.replicas["gw1"]
    wait = anyio.to_thread.run_sync
    for _ in range(rounds):
        sessions = await _fill(gw1.url, PLACES - 1)
        # Both checks have seen it with a place free; then a random phase against their
        # polls, or every round would fill it at the same point of the interval.
        await anyio.sleep(2 * INTER_S + random.uniform(0, INTER_S))
        started = time.monotonic()
        sessions += await _fill(gw1.url, 1)  # the last place: full from now
        agent.append(await wait(_until, cluster, "gw1", "weight", "0", started))
        check.append(await wait(_until, cluster, "gw1", "status", "DOWN", started))
        for websocket in sessions:
            await websocket.close()
        await wait(cluster.wait_for, "gw1", "UP", 30.0)
    victim = cluster.replicas["gw3"]
    for _ in range(rounds):
        await anyio.sleep(random.uniform(0, INTER_S))
        started = time.monotonic()
        await wait(victim.stop, signal.SIGKILL)
        killed.append(await wait(_until, cluster, "gw3", "status", "DOWN", started))
        await wait(victim.start)
        await wait(cluster.wait_for, "gw3", "UP", 30.0)
    return {
        "inter_s": INTER_S,
        "full_to_agent_weight_0_ms": _ms(agent),
        "full_to_http_check_down_ms": _ms(check),
        "sigkill_to_down_ms": _ms(killed),
    }


def _ms(values: list[float]) -> dict[str, float]:
    millis = [1000 * v for v in values]
    return {"median": statistics.median(millis), "min": min(millis), "max": max(millis)}


@dataclass(frozen=True, slots=True)
class LoadPoint:
    path: str
    streams: int
    completed: int
    errors: int
    chunk_p50_ms: float
    chunk_p95_ms: float
    gateway_process_cpu_s_per_audio_h: float
    haproxy_cpu_s_per_audio_h: float


def _load(cluster: Cluster, url: str, path: str, streams: int, seconds: float) -> LoadPoint:
    replicas = [r for r in cluster.replicas.values() if r.process is not None]
    pids = [r.process.pid for r in replicas if r.process is not None]
    gateway_before = sum(cpu_seconds(pid) for pid in pids)
    haproxy_before = cpu_seconds(cluster.process.pid)
    args = ws_load.parse_args(
        [
            *("--url", url, "--streams", str(streams), "--seconds", str(seconds)),
            *("--ramp", "0.6", "--verify", "--quiet"),
        ]
    )
    summary, _ = ws_load.run(args)
    hours = summary.audio_seconds / 3600
    return LoadPoint(
        path=path,
        streams=streams,
        completed=summary.completed,
        errors=summary.errors,
        chunk_p50_ms=round(summary.chunk_latency_ms.p50, 1),
        chunk_p95_ms=round(summary.chunk_latency_ms.p95, 1),
        gateway_process_cpu_s_per_audio_h=round(
            (sum(cpu_seconds(pid) for pid in pids) - gateway_before) / hours, 1
        ),
        haproxy_cpu_s_per_audio_h=round(
            (cpu_seconds(cluster.process.pid) - haproxy_before) / hours, 1
        ),
    )


def _only(cluster: Cluster, names: set[str]) -> None:
    """Servers outside ``names`` in maintenance (HAProxy sends them nothing)."""
    for name in cluster.replicas:
        state = "ready" if name in names else "maint"
        cluster.command(f"set server gateways/{name} state {state}")
    for name in names:
        cluster.wait_for(name, "UP", timeout=30)


def loads(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """The cost of the hop, then 1 replica against 2, on the same cluster."""
    sweep = [int(n) for n in args.sweep.split(",")]
    with (
        tempfile.TemporaryDirectory() as logs,
        haproxy_cluster(Path(logs), env, check_inter_s=INTER_S, places=2000) as cluster,
    ):
        _only(cluster, {"gw1"})
        direct = cluster.replicas["gw1"].url
        cost = [
            asdict(_load(cluster, direct, "direct", args.streams, args.seconds)),
            asdict(_load(cluster, cluster.url, "haproxy", args.streams, args.seconds)),
        ]
        points = []
        for names in ({"gw1"}, {"gw1", "gw2"}):
            _only(cluster, names)
            for streams in sweep:
                path = f"{len(names)} replica(s)"
                points.append(asdict(_load(cluster, cluster.url, path, streams, args.seconds)))
                print(json.dumps(points[-1]), flush=True)
    return {"cost": cost, "replicas": points}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--streams", type=int, default=100, help="the cost comparison's")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--sweep", default="200,400,600,800", help="streams, 1 vs 2 replicas")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--signals-only", action="store_true", help="skip the loads")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    env = {"ASR_WORKERS_PER_DEVICE": "1", "ASR_MAX_SESSIONS_PER_CLIENT": "0"}
    with (
        tempfile.TemporaryDirectory() as logs,
        haproxy_cluster(Path(logs), env, check_inter_s=INTER_S, places=PLACES) as cluster,
    ):
        report["signals"] = anyio.run(signals, cluster, args.rounds)
    if not args.signals_only:
        report.update(loads(args, env))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
