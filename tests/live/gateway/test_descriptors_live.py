"""The file-descriptor table full (EMFILE) on a real uvicorn, on both of its event loops.

The server runs with a soft ``RLIMIT_NOFILE`` of ``NOFILE``; idle TCP connections to its
main port fill the table (each accepted one is a descriptor), as an attacker with a few
hundred sockets, or a leak, would. Meanwhile the agent port's accept fails, and so does the
main port's. Once the connections close, the server must serve as before: the agent answers
(the probe that waited in its backlog too), ``/readyz`` and ``/healthz`` say 200, a session
transcribes exactly, and the log holds a few lines, not one per failed accept.

What happens to a connection that arrives while the table is full depends on the loop:
uvloop (libuv) accepts it into a descriptor it keeps in reserve and closes it at once, so
the client learns at once and may retry (HAProxy's ``retry-on empty-response`` does);
asyncio leaves it in the kernel's backlog, retries its accept every second, and serves it
once descriptors are free.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import httpx
import pytest
from websockets.asyncio.client import connect

from bench.common.gateway import Gateway, serve
from bench.common.net import free_port
from gateway.app import STATIC
from tests.helpers.checksums import END, checksum, config
from tests.helpers.timing import within
from tests.helpers.wav import speech, wav_bytes

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NOFILE = 128  # the server's soft limit: ~25 taken at rest, the rest by idle connections
# Lowers the soft limit, then becomes the server (exec: the same pid, the same signals).
LIMITED = (
    "-c",
    "import os, resource, sys; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1];"
    f" resource.setrlimit(resource.RLIMIT_NOFILE, ({NOFILE}, hard));"
    " os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
)
ACCESS = ('"GET ', '"WebSocket ', "connection open", "connection closed")  # uvicorn's, per request


@dataclass(frozen=True, slots=True)
class Live:
    server: Gateway
    loop: str
    agent_port: int

    def log_since(self, offset: int) -> list[str]:
        return self.server.output()[offset:].splitlines()

    @property
    def log_offset(self) -> int:
        return len(self.server.output())


@pytest.fixture(scope="module", params=["uvloop", "asyncio"])
async def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Live]:
    loop: str = request.param
    agent_port = free_port()
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_AGENT_PORT": str(agent_port),
        "ASR_FETCH_ALLOW_PRIVATE": "1",  # the URL fetch test's file is on loopback
    }
    log = tmp_path_factory.mktemp(f"descriptors-{loop}") / "server.log"
    entry = (*LIMITED, "-m", "uvicorn", "gateway.app:app", "--loop", loop)
    async with serve(env, log, entry=entry) as server:
        yield Live(server, loop, agent_port)


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@asynccontextmanager
async def table_full(live: Live) -> AsyncIterator[None]:
    """Idle connections to the main port until the server holds ``NOFILE`` descriptors;
    all closed on leaving (uvicorn closes its ends as it reads each EOF)."""
    held: list[socket.socket] = []
    try:
        for _ in range(NOFILE):
            held.append(socket.create_connection(("127.0.0.1", live.server.port)))
        with within(10):
            while descriptors(live.server.pid) < NOFILE:  # noqa: ASYNC110 (another process)
                await anyio.sleep(0.02)
        yield
    finally:
        for sock in held:
            sock.close()


@asynccontextmanager
async def table_nearly_full(live: Live, free: int) -> AsyncIterator[None]:
    """Idle connections, one at a time, until the server has ``free`` descriptors left, and
    still has after a moment: a connection of an earlier test that the server closes late
    would free one more, and the test's request would find the table not full."""
    held: list[socket.socket] = []
    pid = live.server.pid
    try:
        with within(20):
            while True:
                while (before := descriptors(pid)) < NOFILE - free:
                    held.append(socket.create_connection(("127.0.0.1", live.server.port)))
                    with anyio.move_on_after(1):  # accepted: one more (unless one closed)
                        while descriptors(pid) <= before:  # noqa: ASYNC110 (another process)
                            await anyio.sleep(0.002)
                await anyio.sleep(0.3)
                if descriptors(pid) >= NOFILE - free:
                    break
        yield
    finally:
        for sock in held:
            sock.close()


def http_get(port: int, path: str) -> tuple[int, bytes]:
    """One request on one new connection: the status and the body, as much as came."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def wait_for_line(live: Live, text: str, offset: int) -> None:
    with within(10):
        while not any(text in line for line in live.log_since(offset)):  # noqa: ASYNC110
            await anyio.sleep(0.05)


def pending(port: int) -> socket.socket:
    """A TCP connection the kernel completes whether or not the server can accept it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    return sock


async def receive_all(sock: socket.socket) -> bytes:
    def read() -> bytes:
        data = b""
        try:
            while chunk := sock.recv(256):
                data += chunk
        except ConnectionResetError:
            pass
        return data

    with sock:
        return await anyio.to_thread.run_sync(read)


async def a_session_verifies(url: str, sock: socket.socket | None = None) -> None:
    pcm = bytes(range(256)) * 75
    with within(30):
        async with connect(url, compression=None, proxy=None, sock=sock) as ws:
            await ws.send(config(mode="offline"))
            await ws.send(pcm)
            await ws.send(END)
            final = json.loads(await ws.recv())
    assert final["text"] == checksum(pcm)


async def serves_as_before(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.server.http, trust_env=False) as http:
        with within(10):
            while (await http.get("/readyz")).status_code != 200:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        health = await http.get("/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert await receive_all(pending(live.agent_port)) == b"ready up 100%\n"
    await a_session_verifies(live.server.url)


async def test_the_agent_answers_the_probe_it_could_not_accept_once_descriptors_are_free(
    live: Live,
) -> None:
    offset = live.log_offset
    async with table_full(live):
        probe = pending(live.agent_port)  # HAProxy's agent check, in the backlog
        await wait_for_line(live, "agent port", offset)
    assert await receive_all(probe) == b"ready up 100%\n"
    await serves_as_before(live)
    agent_lines = [line for line in live.log_since(offset) if "agent port" in line]
    assert len(agent_lines) == 2, agent_lines  # the fault, then its end
    assert "Too many open files" in agent_lines[0]
    assert "accepting again" in agent_lines[1]


async def test_a_live_session_goes_on_while_the_table_is_full(live: Live) -> None:
    """It holds its descriptor already, and the audio and results need no other."""
    pcm = bytes(range(256)) * 75
    async with connect(live.server.url, compression=None, proxy=None) as ws:
        await ws.send(config(mode="offline"))
        async with table_full(live):
            probe = pending(live.agent_port)
            await ws.send(pcm)
            await ws.send(END)
            with within(30):
                final = json.loads(await ws.recv())
    assert final["text"] == checksum(pcm)
    assert await receive_all(probe) == b"ready up 100%\n"


async def test_a_session_arriving_while_the_table_is_full_is_served_or_closed_at_once(
    live: Live,
) -> None:
    async with anyio.create_task_group() as group, table_full(live):
        sock = pending(live.server.port)
        if live.loop == "asyncio":
            # Left in the backlog: the session goes on once descriptors are free.
            group.start_soon(a_session_verifies, live.server.url, sock)
        else:
            # uvloop's reserve descriptor: accepted and closed, the client told at once.
            sock.settimeout(2)
            assert await receive_all(sock) == b""
    await serves_as_before(live)


async def main_port_fault_over(live: Live) -> None:
    """asyncio does not say when an accept works again: the gateway says so after a quiet
    2 s; a fault that starts again before then is the same fault, and gets no new line."""
    with within(10):
        while True:
            lines = live.log_since(0)
            started = sum("main port: accept failed" in line for line in lines)
            if started == sum("main port: accepting again" in line for line in lines):
                return
            await anyio.sleep(0.05)


async def test_a_second_of_a_full_table_costs_a_few_log_lines(live: Live) -> None:
    await main_port_fault_over(live)
    offset = live.log_offset
    async with table_full(live):
        pending(live.agent_port).close()  # an agent check that gives up
        await wait_for_line(live, "agent port", offset)
        # The main port's accept too: asyncio retries it every second.
        await anyio.sleep(1.5)
    await serves_as_before(live)
    lines = [line for line in live.log_since(offset) if not any(a in line for a in ACCESS)]
    assert len(lines) <= 4, lines[:20]
    assert any("agent port: accept failed" in line for line in lines)
    # uvloop drops what it cannot accept, silently; asyncio reports each failed accept.
    main_port = any("main port: accept failed" in line for line in lines)
    assert main_port == (live.loop == "asyncio")


@pytest.mark.parametrize("path", ["/", "/static/page.js"])
async def test_the_page_is_served_on_the_last_free_descriptor(live: Live, path: str) -> None:
    """The request's own connection takes the last descriptor: the page needs no other."""
    name = "index.html" if path == "/" else path.removeprefix("/static/")
    async with table_nearly_full(live, free=1):
        status, body = await anyio.to_thread.run_sync(http_get, live.server.port, path)
    assert (status, body) == (200, (STATIC / name).read_bytes())


class _OneWav(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def http_post_json(port: int, path: str, fields: dict[str, object]) -> tuple[int, str, bytes]:
    """One POST on one new connection: the status, the Retry-After header, the body."""
    body = json.dumps(fields).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, answer = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    retry = next(
        (
            line.split(":", 1)[1].strip()
            for line in lines
            if line.lower().startswith("retry-after:")
        ),
        "",
    )
    return int(lines[0].split()[1]), retry, answer


async def test_a_url_fetch_with_no_descriptor_free_is_503_to_retry(live: Live) -> None:
    """The request's connection took the last descriptor, and the fetch's socket finds
    none: 503 with Retry-After (the server's state, not the URL's fault), and the same
    request once descriptors are free transcribes the file."""
    samples = speech(0.5)
    handler = type("Wav", (_OneWav,), {"body": wav_bytes(samples)})
    files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=files.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{files.server_address[1]}/speech.wav"
        fields: dict[str, object] = {"url": url}
        request = (live.server.port, "/v1/transcribe", fields)
        offset = live.log_offset
        async with table_nearly_full(live, free=1):
            status, retry, body = await anyio.to_thread.run_sync(http_post_json, *request)
        assert (status, retry) == (503, "1"), body
        assert "no free descriptor" in json.loads(body)["error"]["message"]
        assert not [line for line in live.log_since(offset) if "Traceback" in line]
        status, _retry, body = await anyio.to_thread.run_sync(http_post_json, *request)
        assert status == 200, body
        assert json.loads(body)["text"] == checksum(samples.astype("<i2").tobytes())
    finally:
        files.shutdown()
        files.server_close()
