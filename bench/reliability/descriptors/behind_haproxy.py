"""``haproxy``: HAProxy's view of a replica (``deploy/haproxy.cfg``) whose table is full."""

from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common.net import free_port
from bench.reliability.descriptors.gateway import (
    READY_TIMEOUT_S,
    Gateway,
    Status,
    close_all,
    fill,
    http_status,
    limited_gateway,
    stop,
)

HAPROXY_UP_AFTER_S = 15.0  # the old checkout stayed DOWN: give up after this


@dataclass(frozen=True, slots=True)
class ServerView:
    """One line of HAProxy's ``show stat`` for a server."""

    status: str
    weight: str
    check: str
    agent: str


@dataclass(frozen=True, slots=True)
class HaproxyRun:
    root: str
    hold_s: float
    freed_at_s: float
    through_haproxy_200_after_free_s: float | None
    through_haproxy_at_end: Status
    timeline: list[tuple[float, ServerView]]  # seconds from the fill, at each change


def server_view(stats_socket: Path, server: str = "gw1") -> ServerView:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(stats_socket))
        sock.sendall(b"show stat\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
    row = next(r for r in rows if r["pxname"] == "gateways" and r["svname"] == server)
    return ServerView(row["status"], row["weight"], row["check_status"], row["agent_status"])


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if found is None:
        raise SystemExit("no haproxy on PATH or in /usr/sbin (Debian: apt-get install haproxy)")
    return found


def wait_until_up(stats_socket: Path, haproxy: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not (stats_socket.exists() and server_view(stats_socket).status.startswith("UP")):
        if haproxy.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("HAProxy did not start, or never saw gw1 UP")
        time.sleep(0.05)


def haproxy(root: Path, nofile: int, hold_s: float, logs: Path) -> HaproxyRun:
    binary = haproxy_binary()
    env = {"ASR_AGENT_PORT": "free", "ASR_REPLICA_ID": "gw1"}
    with limited_gateway(root, "auto", nofile, logs / "gw1.log", env) as gateway:
        stats_socket, front = logs / "haproxy.sock", free_port()
        haproxy_env = {
            **os.environ,
            "HAPROXY_BIND": f"127.0.0.1:{front}",
            "HAPROXY_STATS_BIND": f"127.0.0.1:{free_port()}",
            "HAPROXY_STATS_SOCKET": str(stats_socket),
            "HAPROXY_MAXCONN": "4000",
            "GW1_ADDR": f"127.0.0.1:{gateway.port}",
            "GW1_AGENT_PORT": str(gateway.agent_port),
            # Nobody listens there (DOWN): gw1 is the only server.
            "GW2_ADDR": f"127.0.0.1:{free_port()}",
            "GW3_ADDR": f"127.0.0.1:{free_port()}",
        }
        command = [binary, "-f", str(root / "deploy" / "haproxy.cfg"), "-db"]
        with (logs / "haproxy.log").open("wb") as out:
            process = subprocess.Popen(
                command, env=haproxy_env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            wait_until_up(stats_socket, process)
            return _fill_behind_haproxy(gateway, stats_socket, front, nofile, hold_s, root)
        finally:
            stop(process, timeout=10)


def _fill_behind_haproxy(
    gateway: Gateway, stats_socket: Path, front: int, nofile: int, hold_s: float, root: Path
) -> HaproxyRun:
    timeline: list[tuple[float, ServerView]] = []
    last: ServerView | None = None

    def record(since: float) -> ServerView:
        nonlocal last
        view = server_view(stats_socket)
        if view != last:
            timeline.append((round(time.monotonic() - since, 2), view))
            last = view
        return view

    front_url = f"http://127.0.0.1:{front}/readyz"
    started = time.monotonic()
    held = fill(gateway.port, nofile)
    try:
        while time.monotonic() - started < hold_s:
            record(started)
            time.sleep(0.05)
    finally:
        close_all(held)
    freed = time.monotonic()
    up_after = None
    while time.monotonic() - freed < HAPROXY_UP_AFTER_S:
        if record(started).status.startswith("UP") and http_status(front_url, 3) == 200:
            up_after = round(time.monotonic() - freed, 2)
            break
        time.sleep(0.05)
    return HaproxyRun(
        root=str(root),
        hold_s=hold_s,
        freed_at_s=round(freed - started, 2),
        through_haproxy_200_after_free_s=up_after,
        through_haproxy_at_end=http_status(front_url, 3),
        timeline=timeline,
    )
