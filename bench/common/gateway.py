"""A real gateway in a subprocess on a free port, for the benchmarks and the integration
tests: ``uvicorn gateway.app:app`` (``UVICORN``, the default) or ``python -m gateway``
(``GATEWAY``).

``start`` runs it with ``env`` over ours and returns it once ``/readyz`` says ready; ``stop``
(or leaving its ``with``) ends it: SIGTERM, its drain, then SIGKILL if it hangs. ``served``
is how the benchmarks run it, as the README serves it. ``serve`` and ``serve_blocking`` are
the tests': the same gateway, its exit code checked to be 0 on leaving.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from bench.common import ROOT
from bench.common.net import free_port

UVICORN = ("-m", "uvicorn", "gateway.app:app")  # bare uvicorn: the app wraps its signals
GATEWAY = ("-m", "gateway")  # our uvicorn Server, which drains itself
# As the README serves it: no WebSocket compression (PCM does not compress). A benchmark
# may set UVICORN_WS_PER_MESSAGE_DEFLATE=true over it to measure it on.
NO_DEFLATE: Mapping[str, str] = {"UVICORN_WS_PER_MESSAGE_DEFLATE": "false"}
QUIET = ("--log-level", "warning")
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
# No proxy from the environment: every address here is loopback.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class NotReady(RuntimeError):
    """The gateway exited, or did not answer ``/readyz`` 200 in time: its exit code (None:
    it was still running, and is killed) and the end of its log."""

    def __init__(self, why: str, code: int | None, tail: str) -> None:
        super().__init__(f"{why}; its log:\n{tail}" if tail else why)
        self.code = code
        self.tail = tail


class Gateway:
    """One running gateway process; ``stop`` is safe to call twice."""

    def __init__(
        self, process: subprocess.Popen[bytes], port: int, log: Path | None, own_session: bool
    ) -> None:
        self.process = process
        self.port = port
        self.log = log
        self._own_session = own_session

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        """Its log so far ("" where it writes to our terminal)."""
        return "" if self.log is None else self.log.read_text(errors="replace")

    def ready(self) -> bool:
        try:
            with OPENER.open(f"{self.http}/readyz", timeout=1) as response:
                return bool(response.status == 200)
        except (OSError, http.client.HTTPException):
            return False  # not listening yet, or a 503

    def readyz(self, timeout: float = 5.0) -> dict[str, Any]:
        """``/readyz``'s body, ready or not: a full or restarting gateway says why."""
        try:
            with OPENER.open(f"{self.http}/readyz", timeout=timeout) as response:
                body: dict[str, Any] = json.load(response)
        except urllib.error.HTTPError as error:  # 503: still the body
            body = json.load(error)
        return body

    def worker_pids(self) -> tuple[int, ...]:
        return tuple(int(w["pid"]) for w in self.readyz().get("workers", []))

    def send_signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def signal_group(self, sig: signal.Signals) -> None:
        """``sig`` to the server and its workers at once (it runs in a session of its own)."""
        os.killpg(self.process.pid, sig)

    def terminate(self) -> None:
        """SIGTERM, as a process manager would; ``wait`` or ``exited`` for the exit."""
        self.send_signal(signal.SIGTERM)

    def terminate_group(self) -> None:
        """SIGTERM to the server and its workers at once, as systemd does by default."""
        self.signal_group(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, to its workers too where it has a session of its own; then reap it."""
        if self.running:
            if self._own_session:
                self.signal_group(signal.SIGKILL)
            else:
                self.process.kill()
        self.process.wait()

    def wait(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Its exit code; ``subprocess.TimeoutExpired`` past ``timeout``."""
        return self.process.wait(timeout)

    async def exited(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """``wait`` for an event loop: polled, so that a cancel ends it at once."""
        with anyio.fail_after(timeout):
            while (code := self.process.poll()) is None:  # noqa: ASYNC110 (another process)
                await anyio.sleep(0.05)
        return code

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and its exit code; SIGKILL if it has not exited after ``timeout``."""
        if self.running:
            self.terminate()
            try:
                return self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.wait()

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if not self.running:
                raise NotReady("the gateway exited", self.process.poll(), self._tail())
            if time.monotonic() > deadline:
                raise NotReady(f"no /readyz 200 in {timeout:g} s", None, self._tail())
            time.sleep(0.1)

    def _tail(self) -> str:
        return self.output()[-2000:]

    def __enter__(self) -> Gateway:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start(
    env: Mapping[str, str],
    *,
    log: Path | None = None,
    entry: Sequence[str] = UVICORN,
    options: Sequence[str] = (),
    wrapper: Sequence[str] = (),
    port: int | None = None,
    send_buffer: int | None = None,
    cwd: Path = ROOT,
    own_session: bool = False,
    append_log: bool = False,
    ready_timeout: float = READY_TIMEOUT_S,
) -> Gateway:
    """Start the gateway with ``env`` added to ours and wait until ``/readyz`` says ready.

    ``log``: a file for its output (``append_log``: after what is there), else our own
    stdout and stderr. ``options``: the server's, after ``--port``. ``wrapper``: a command
    that execs the server (``prlimit --nofile=N:N``), so that the pid is still the
    server's. ``port``: a fixed one (a replica restarted on its own), else a free one.
    ``cwd``: the checkout it runs from. ``own_session``: a session of its own, so that a
    Ctrl-C in the terminal is the caller's alone and ``kill`` reaches its workers too.

    ``send_buffer``: the kernel send buffer of every connection the server accepts, in
    bytes (``SO_SNDBUF`` on a listening socket we hand it with ``--fd``; accepted sockets
    inherit it). Unset, the kernel's autotuning lets a loopback connection buffer up to
    ``net.ipv4.tcp_wmem``'s maximum (4 MiB here) before a send blocks.
    """
    listener: socket.socket | None = None
    if send_buffer is None:
        port = free_port() if port is None else port
        where = ["--port", str(port)]
    else:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
        listener.bind(("127.0.0.1", port or 0))
        listener.listen(128)
        port = listener.getsockname()[1]
        where = ["--fd", str(listener.fileno())]
    command = [*wrapper, sys.executable, *entry, *where, *options]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    out = None if log is None else log.open("ab" if append_log else "wb")
    try:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=None if out is None else subprocess.STDOUT,
            start_new_session=own_session,
            pass_fds=() if listener is None else (listener.fileno(),),
        )
    finally:
        if out is not None:
            out.close()  # the server has its own copy
        if listener is not None:
            listener.close()
    gateway = Gateway(process, port, log, own_session)
    try:
        gateway.wait_ready(ready_timeout)
    except BaseException:
        gateway.kill()
        raise
    return gateway


def served(
    env: Mapping[str, str], *, ready_timeout: float = READY_TIMEOUT_S, cwd: Path = ROOT
) -> Gateway:
    """The gateway as the benchmarks measure it: served as the README serves it, logging
    only warnings (to our terminal); from the checkout ``cwd``."""
    return start({**NO_DEFLATE, **env}, options=QUIET, ready_timeout=ready_timeout, cwd=cwd)


@asynccontextmanager
async def serve(
    env: Mapping[str, str],
    log: Path,
    *,
    ready_timeout: float = READY_TIMEOUT_S,
    entry: Sequence[str] = UVICORN,
    options: Sequence[str] = (),
    send_buffer: int | None = None,
) -> AsyncIterator[Gateway]:
    """``start`` for an event loop, in a session of its own, logging to ``log``. On leaving,
    SIGTERM (unless the test stopped it already) and assert a clean exit: code 0."""
    launch = partial(
        start,
        env,
        log=log,
        entry=entry,
        options=options,
        send_buffer=send_buffer,
        own_session=True,
        ready_timeout=ready_timeout,
    )
    gateway = await anyio.to_thread.run_sync(launch)
    try:
        yield gateway
        if gateway.running:
            gateway.terminate()
        code = await gateway.exited()
        assert code == 0, f"the server exited with {code}:\n{gateway.output()}"
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(gateway.kill)


@contextmanager
def serve_blocking(
    env: Mapping[str, str], log: Path, *, ready_timeout: float = READY_TIMEOUT_S
) -> Iterator[Gateway]:
    """``serve`` for tests that are not async (hypothesis's, a module's fixture)."""
    gateway = start(env, log=log, own_session=True, ready_timeout=ready_timeout)
    try:
        yield gateway
        if gateway.running:
            gateway.terminate()
        code = gateway.wait()
        assert code == 0, f"the server exited with {code}:\n{gateway.output()}"
    finally:
        gateway.kill()
