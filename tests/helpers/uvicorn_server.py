"""A real gateway in a subprocess on a free port, for integration tests: ``uvicorn
gateway.app:app`` (``UVICORN``, the default) or ``python -m gateway`` (``GATEWAY``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import httpx
from anyio.from_thread import start_blocking_portal

ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 30.0
UVICORN = ("-m", "uvicorn", "gateway.app:app")  # bare uvicorn: the app wraps its signals
GATEWAY = ("-m", "gateway")  # our uvicorn Server, which drains itself


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Server:
    process: anyio.abc.Process
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def terminate(self) -> None:
        """Send SIGTERM, as a process manager would; ``wait`` for the exit."""
        self.process.send_signal(signal.SIGTERM)

    def terminate_group(self) -> None:
        """SIGTERM to the server and its workers at once, as systemd does by default."""
        os.killpg(self.process.pid, signal.SIGTERM)

    async def wait(self, timeout: float = STOP_TIMEOUT_S) -> int:
        with anyio.fail_after(timeout):
            return await self.process.wait()


async def _wait_ready(server: Server, timeout: float) -> None:
    with anyio.fail_after(timeout):
        async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
            while True:
                if server.process.returncode is not None:
                    raise RuntimeError(f"the server exited early:\n{server.output()}")
                try:
                    if (await http.get("/readyz")).status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                await anyio.sleep(0.1)


@asynccontextmanager
async def serve(
    env: Mapping[str, str],
    log: Path,
    *,
    ready_timeout: float = 120.0,
    entry: Sequence[str] = UVICORN,
    send_buffer: int | None = None,
) -> AsyncIterator[Server]:
    """Start the gateway with ``env`` added to ours and wait until ``/readyz`` says ready.

    ``send_buffer``: the kernel send buffer of every connection the server accepts, in
    bytes (``SO_SNDBUF`` on a listening socket we hand it with ``--fd``; accepted sockets
    inherit it). Unset, the kernel's autotuning lets a loopback connection buffer up to
    ``net.ipv4.tcp_wmem``'s maximum (4 MiB here) before a send blocks.

    On leaving, SIGTERM (unless the test stopped it already) and assert a clean exit: code 0.
    """
    listener: socket.socket | None = None
    if send_buffer is None:
        port = free_port()
        command = [sys.executable, *entry, "--port", str(port)]
    else:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        command = [sys.executable, *entry, "--fd", str(listener.fileno())]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    with log.open("wb") as log_file:
        process = await anyio.open_process(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=full_env,
            start_new_session=True,  # a Ctrl-C in the terminal is the test runner's alone
            pass_fds=() if listener is None else (listener.fileno(),),
        )
    if listener is not None:
        listener.close()  # the server has its own copy
    server = Server(process, port, log)
    try:
        await _wait_ready(server, ready_timeout)
        yield server
        if process.returncode is None:
            server.terminate()
        code = await server.wait()
        assert code == 0, f"the server exited with {code}:\n{server.output()}"
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.move_on_after(STOP_TIMEOUT_S, shield=True):
                await process.wait()
        await process.aclose()


@contextmanager
def serve_blocking(
    env: Mapping[str, str], log: Path, *, ready_timeout: float = 120.0
) -> Iterator[Server]:
    """``serve`` for tests that are not async (hypothesis's, a module's fixture): the same
    server and checks, its process looked after by an event loop in a thread of its own."""
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(serve(env, log, ready_timeout=ready_timeout)) as server,
    ):
        yield server
