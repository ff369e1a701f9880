"""A ``websockets`` client's session with a real uvicorn (``bench.common.gateway.serve``):
opening it, sending its frames, reading its results up to the final one, and the error
frame and close code that end it; and a uvicorn start that fails (``failed_start``)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from bench.common import ROOT
from bench.common.gateway import Gateway
from tests.helpers.timing import within


def open_session(server: Gateway) -> connect:
    return connect(
        server.url,
        subprotocols=[Subprotocol("binary")],
        compression=None,
        proxy=None,
        max_size=None,
    )


async def send_frames(ws: ClientConnection, frames: Sequence[str | bytes]) -> None:
    for frame in frames:
        await ws.send(frame)


async def receive_until_final(ws: ClientConnection) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    while True:
        message = json.loads(await ws.recv())
        assert "type" not in message, message
        results.append(message)
        if message["is_final"]:
            return results


async def expect_close(ws: ClientConnection, code: int) -> dict[str, Any]:
    """Our error frame with ``code`` (results may come first), then the close with it."""
    while True:
        message: dict[str, Any] = json.loads(await ws.recv())
        if message.get("type") == "error":
            break
    assert message["code"] == code, message
    with pytest.raises(ConnectionClosed) as closed:
        await ws.recv()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == code
    return message


async def failed_start(env: Mapping[str, str], deadline_s: float) -> tuple[int, str]:
    """``uvicorn gateway.app:app`` started with ``env`` and run to its exit: its exit code
    and its output (stdout and stderr). For starts that must fail."""
    with within(deadline_s):
        result = await anyio.run_process(
            [sys.executable, "-m", "uvicorn", "gateway.app:app", "--port", "0"],
            cwd=ROOT,
            env=dict(env),
            check=False,
        )
    return result.returncode, result.stdout.decode() + result.stderr.decode()
