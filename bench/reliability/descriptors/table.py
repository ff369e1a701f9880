"""``table``: a full table probed like HAProxy, then freed: what came back, and how soon."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from bench.reliability.descriptors.gateway import (
    Gateway,
    Status,
    close_all,
    fill,
    limited_gateway,
    peek,
    tally,
)

PROBE_EVERY_S = 0.5  # deploy/haproxy.cfg's check interval
RECOVERY_TIMEOUT_S = 10.0
QUIET_S = 2.5  # the main port's fault log says "over" 2 s after the last failed accept


@dataclass(frozen=True, slots=True)
class TableRun:
    loop: str
    nofile: int
    root: str
    baseline_fds: int
    fill_s: float
    connections_to_fill: int
    held_s: float
    server_cpu_s_per_s_full: float
    log_lines_per_s_full: float
    agent_probes_while_full: dict[str, int]
    main_checks_while_full: dict[str, int]
    # Seconds from freeing the descriptors; None: not within RECOVERY_TIMEOUT_S.
    agent_backlog_answered_s: float | None
    main_backlog_answered_s: float | None
    new_readyz_200_s: float | None
    agent_probes_after: dict[str, int]
    main_checks_after: dict[str, int]
    healthz_after: Status
    readyz_after: Status
    agent_after: str
    log_lines_total_episode: int


@dataclass(frozen=True, slots=True)
class Probes:
    """The connections a HAProxy-like prober opened while the table was full."""

    agent: list[socket.socket]
    checks: list[socket.socket]
    agent_refused: int
    checks_refused: int
    held_s: float


def probe_while_full(gateway: Gateway, hold_s: float) -> Probes:
    assert gateway.agent_port is not None
    agent: list[socket.socket] = []
    checks: list[socket.socket] = []
    agent_refused = checks_refused = 0
    started = time.monotonic()
    while time.monotonic() - started < hold_s:
        try:
            agent.append(socket.create_connection(("127.0.0.1", gateway.agent_port), 10))
        except ConnectionRefusedError:  # the old checkout's agent died with its accept
            agent_refused += 1
        try:
            check = socket.create_connection(("127.0.0.1", gateway.port), 10)
        except ConnectionRefusedError:
            checks_refused += 1
        else:
            checks.append(check)
            try:
                check.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            except OSError:  # uvloop closed it at once: peek says so
                pass
        time.sleep(PROBE_EVERY_S)
    held_s = time.monotonic() - started
    for sock in agent + checks:
        sock.setblocking(False)  # peek must not wait
    return Probes(agent, checks, agent_refused, checks_refused, held_s)


def recovery(gateway: Gateway, probes: Probes, freed: float) -> dict[str, float]:
    """Seconds from ``freed`` to each sign of recovery seen within RECOVERY_TIMEOUT_S."""
    seen: dict[str, float] = {}
    while time.monotonic() < freed + RECOVERY_TIMEOUT_S and len(seen) < 3:
        if "agent" not in seen and all(peek(s) != "waiting" for s in probes.agent):
            seen["agent"] = round(time.monotonic() - freed, 3)
        if "main" not in seen and all(peek(s) != "waiting" for s in probes.checks):
            seen["main"] = round(time.monotonic() - freed, 3)
        if "readyz" not in seen and gateway.status("/readyz") == 200:
            seen["readyz"] = round(time.monotonic() - freed, 3)
        time.sleep(0.01)
    return seen


def agent_answer(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            return sock.recv(64).decode().strip()
    except OSError as error:
        return type(error).__name__


def table(root: Path, loop: str, nofile: int, hold_s: float, logs: Path) -> TableRun:
    env = {"ASR_AGENT_PORT": "free"}
    with limited_gateway(root, loop, nofile, logs / "gateway.log", env) as gateway:
        assert gateway.agent_port is not None
        baseline = gateway.descriptors()
        held: list[socket.socket] = []
        probes = Probes([], [], 0, 0, 0.0)
        try:
            started = time.monotonic()
            held = fill(gateway.port, nofile)
            gateway.wait_full(nofile)
            fill_s = time.monotonic() - started
            lines_before, cpu_before = gateway.log_lines(), gateway.cpu_seconds()
            probes = probe_while_full(gateway, hold_s)
            cpu_full = (gateway.cpu_seconds() - cpu_before) / probes.held_s
            lines_full = (gateway.log_lines() - lines_before) / probes.held_s
            agent_full = tally(probes.agent, probes.agent_refused)
            checks_full = tally(probes.checks, probes.checks_refused)
            freed = time.monotonic()
            close_all(held)
            seen = recovery(gateway, probes, freed)
            agent_after, checks_after = tally(probes.agent), tally(probes.checks)
            time.sleep(QUIET_S)
            return TableRun(
                loop=loop,
                nofile=nofile,
                root=str(root),
                baseline_fds=baseline,
                fill_s=round(fill_s, 3),
                connections_to_fill=nofile - baseline,
                held_s=round(probes.held_s, 2),
                server_cpu_s_per_s_full=round(cpu_full, 3),
                log_lines_per_s_full=round(lines_full, 1),
                agent_probes_while_full=agent_full,
                main_checks_while_full=checks_full,
                agent_backlog_answered_s=seen.get("agent"),
                main_backlog_answered_s=seen.get("main"),
                new_readyz_200_s=seen.get("readyz"),
                agent_probes_after=agent_after,
                main_checks_after=checks_after,
                healthz_after=gateway.status("/healthz"),
                readyz_after=gateway.status("/readyz"),
                agent_after=agent_answer(gateway.agent_port),
                log_lines_total_episode=gateway.log_lines() - lines_before,
            )
        finally:
            close_all(held + probes.agent + probes.checks)
