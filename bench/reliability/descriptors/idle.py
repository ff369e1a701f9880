"""``idle``: RSS per idle connection, and whether the server ever closes one."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from bench.reliability.descriptors.gateway import close_all, fill, limited_gateway, peek

IDLE_S = 10.0  # after the 1 s the RSS is left to settle: 11 s of silence in all


@dataclass(frozen=True, slots=True)
class IdleRun:
    loop: str
    nofile: int
    root: str
    connections: int  # the idle connections that filled the table
    fill_s: float
    rss_before_kb: int
    rss_full_kb: int
    rss_kb_per_connection: float
    idle_s: float
    closed_by_server: int  # of ``connections``, after ``idle_s`` of silence


def idle(root: Path, loop: str, nofile: int, logs: Path) -> IdleRun:
    with limited_gateway(root, loop, nofile, logs / "gateway.log") as gateway:
        rss_before, baseline = gateway.rss_kb(), gateway.descriptors()
        held: list[socket.socket] = []
        try:
            started = time.monotonic()
            held = fill(gateway.port, nofile)
            gateway.wait_full(nofile)
            fill_s = time.monotonic() - started
            time.sleep(1.0)  # the server's reads of the accepted connections settle
            rss_full = gateway.rss_kb()
            time.sleep(IDLE_S)
            accepted = held[: nofile - baseline]  # the rest wait in the backlog
            for sock in accepted:
                sock.setblocking(False)
            closed = sum(peek(sock) in ("closed", "reset") for sock in accepted)
        finally:
            close_all(held)
    return IdleRun(
        loop=loop,
        nofile=nofile,
        root=str(root),
        connections=len(accepted),
        fill_s=round(fill_s, 3),
        rss_before_kb=rss_before,
        rss_full_kb=rss_full,
        rss_kb_per_connection=round((rss_full - rss_before) / len(accepted), 2),
        idle_s=1.0 + IDLE_S,
        closed_by_server=closed,
    )
