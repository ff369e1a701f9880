"""Helpers for tests of resumable sessions against a real server: open one, drop its
connection as a network would, resume it, read what a refusal says, and read metrics."""

from __future__ import annotations

import fcntl
import json
import struct
import termios
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from bench.common.gateway import Gateway
from tests.helpers.checksums import config
from tests.helpers.timing import within

KEY_A, KEY_B = "resume-key-a", "resume-key-b"
FRAME_BYTES = 1920  # what gateway.client sends: 60 ms x chunk_size[1] / chunk_interval


async def open_resumable(
    url: str, key: str = KEY_A, query: str = "", *, source: str | None = None
) -> tuple[ClientConnection, dict[str, Any]]:
    """A resumable session with one chunk of audio sent; its session frame. ``source``: the
    client's address (any of 127.0.0.0/8 reaches a loopback server), for per-client limits."""
    websocket = await connect(
        url + query,
        compression=None,
        additional_headers={"Authorization": f"Bearer {key}"},
        local_addr=None if source is None else (source, 0),
    )
    await websocket.send(config(resumable=True))
    session = json.loads(await websocket.recv())
    assert session["type"] == "session"
    assert not session["resumed"]
    await websocket.send(bytes(2 * FRAME_BYTES * 10))  # 1.2 s: two results
    return websocket, session


async def results_up_to(websocket: ClientConnection, count: int) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    while len(results) < count:
        message = json.loads(await websocket.recv())
        if "result_id" in message:
            results.append(message)
    return results


async def until_acknowledged(websocket: ClientConnection) -> None:
    """Wait (up to 5 s) until every byte written on the connection is in the server's
    kernel: the transport's buffer empty, and nothing unacknowledged in the socket's send
    queue (``TIOCOUTQ``)."""
    transport = websocket.transport
    sock = transport.get_extra_info("socket")
    with within(5):
        while transport.get_write_buffer_size() or _unacknowledged(sock.fileno()):  # noqa: ASYNC110
            await anyio.sleep(0.005)


def _unacknowledged(fd: int) -> int:
    (count,) = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0" * 4))
    return int(count)


def drop(websocket: ClientConnection) -> None:
    """Lose the connection as a phone changing cell does: no close frame."""
    websocket.transport.abort()


async def resume(
    url: str, token: str, last_result: int = 0, key: str = KEY_A
) -> tuple[ClientConnection, dict[str, Any]]:
    websocket = await connect(
        f"{url}?resume={token}&last_result={last_result}",
        compression=None,
        additional_headers={"Authorization": f"Bearer {key}"},
    )
    return websocket, json.loads(await websocket.recv())


async def refusal(url: str, token: str, last_result: int = 0, key: str = KEY_A) -> dict[str, Any]:
    """A resume that must fail: its error frame, whose code is also the close code."""
    websocket, frame = await resume(url, token, last_result, key)
    assert frame["type"] == "error", frame
    with pytest.raises(ConnectionClosed) as closed:
        await websocket.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == frame["code"]
    return frame


async def refused(url: str, token: str, last_result: int = 0, key: str = KEY_A) -> int:
    """A resume that must fail: its close code."""
    code: int = (await refusal(url, token, last_result, key))["code"]
    return code


async def metric(server: Gateway, name: str) -> float:
    async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
        text = (await http.get("/metrics", headers={"Authorization": f"Bearer {KEY_A}"})).text
    lines = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(lines[0].split()[1]) if lines else 0.0


async def until_metric(server: Gateway, name: str, value: float) -> None:
    """Wait (up to 5 s) for a metric to read ``value``: the server updates it as it goes."""
    with within(5):
        while await metric(server, name) != value:  # noqa: ASYNC110 (another process)
            await anyio.sleep(0.05)
