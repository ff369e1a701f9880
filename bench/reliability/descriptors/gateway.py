"""The gateway under a lowered ``RLIMIT_NOFILE``, and the connections that fill its table."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.common import procfs
from bench.common.gateway import NotReady, start
from bench.common.net import free_port

READY_TIMEOUT_S = 60.0
FULL_TIMEOUT_S = 30.0
# No proxy from the environment: every address here is loopback.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

Status = int | str  # an HTTP status, or the name of the error that stood for one


def http_status(url: str, timeout: float = 2.0) -> Status:
    try:
        with OPENER.open(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except Exception as error:  # the point is to name whatever it was
        return type(error).__name__


@dataclass(frozen=True, slots=True)
class Gateway:
    """A running ``uvicorn gateway.app:app`` under a lowered ``RLIMIT_NOFILE``."""

    process: subprocess.Popen[bytes]
    port: int
    agent_port: int | None
    log: Path

    def status(self, path: str) -> Status:
        return http_status(f"http://127.0.0.1:{self.port}{path}")

    def descriptors(self) -> int:
        return procfs.descriptors(self.process.pid)

    def cpu_seconds(self) -> float:
        return procfs.cpu_seconds(self.process.pid)

    def rss_kb(self) -> int:
        return procfs.rss_kib(self.process.pid)

    def log_lines(self) -> int:
        return self.log.read_bytes().count(b"\n")

    def wait_full(self, nofile: int) -> None:
        """Until the server holds ``nofile`` descriptors (it accepts what ``fill`` opened)."""
        deadline = time.monotonic() + FULL_TIMEOUT_S
        while self.descriptors() < nofile:
            if time.monotonic() > deadline:
                raise SystemExit(f"the server's table did not fill: {self.descriptors()} open")
            time.sleep(0.005)


def stop(process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL to its process group (its workers too) if it hangs."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def limited_gateway(
    root: Path, loop: str, nofile: int, log: Path, env: dict[str, str] | None = None
) -> Iterator[Gateway]:
    """The gateway of checkout ``root`` with ``nofile`` descriptors, ready on a free port.

    ``env`` may set ``ASR_AGENT_PORT`` to ``"free"``: a free port is picked for it.
    """
    extra = dict(env or {})
    agent_port = free_port() if extra.get("ASR_AGENT_PORT") == "free" else None
    if agent_port is not None:
        extra["ASR_AGENT_PORT"] = str(agent_port)
    try:
        # prlimit execs the server: its pid is the server's, whose /proc the measures read.
        # Its own session: a SIGKILL on a hang reaches the workers, and a Ctrl-C at the
        # terminal does not reach it before our cleanup does.
        server = start(
            {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", **extra},
            log=log,
            options=["--loop", loop],
            wrapper=["prlimit", f"--nofile={nofile}:{nofile}"],
            cwd=root,
            own_session=True,
            ready_timeout=READY_TIMEOUT_S,
        )
    except NotReady as error:
        raise SystemExit(f"the gateway in {root} did not become ready: {error}") from None
    try:
        yield Gateway(server.process, server.port, agent_port, log)
    finally:
        server.stop(timeout=30.0)


def fill(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]


def close_all(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


def peek(sock: socket.socket) -> str:
    """What the server did with a connection, without waiting (the socket is non-blocking)."""
    try:
        data = sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK)
        return "closed" if data == b"" else "answered"
    except (BlockingIOError, TimeoutError):
        return "waiting"
    except ConnectionResetError:
        return "reset"


def tally(sockets: list[socket.socket], refused: int = 0) -> dict[str, int]:
    counts: dict[str, int] = {}
    for sock in sockets:
        state = peek(sock)
        counts[state] = counts.get(state, 0) + 1
    return counts | ({"refused": refused} if refused else {})
