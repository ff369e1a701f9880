"""Driving a FunASR session through Starlette's TestClient: frames sent, results read to
the final, our error frame and its close code expected, and a condition of another process
waited for."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from starlette.testclient import WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.checksums import funasr_reads

# The in-process app of the endpoint tests: one checksum worker.
APP_SETTINGS = GatewaySettings(
    pool=PoolSettings(model="checksum", devices=("cpu",)),
    max_frame_bytes=65536,
    max_text_bytes=4096,
    # Far above any test's need, so that a session the server forgets fails the test
    # with a close instead of hanging it.
    idle_timeout_s=10.0,
    max_session_s=60.0,
)

Frame = str | bytes


def send(ws: WebSocketTestSession, frames: Sequence[Frame]) -> None:
    for frame in frames:
        if isinstance(frame, bytes):
            ws.send_bytes(frame)
        else:
            ws.send_text(frame)


def receive_until_final(ws: WebSocketTestSession) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    while True:
        message = funasr_reads(ws.receive_json())
        assert "type" not in message, message
        results.append(message)
        if message["is_final"]:
            return results


def expect_error(ws: WebSocketTestSession, code: int) -> dict[str, Any]:
    """Our error frame with ``code`` (results may come first), then the close with ``code``."""
    while True:
        message: dict[str, Any] = funasr_reads(ws.receive_json())
        if message.get("type") == "error":
            break
    assert message["code"] == code, message
    assert (message["text"], message["is_final"]) == ("", False)  # harmless to FunASR's
    assert isinstance(message["message"], str)
    assert message["message"]
    with pytest.raises(WebSocketDisconnect) as closed:
        ws.receive_text()
    assert closed.value.code == code
    return message


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll a condition set by another process (a worker restarting), up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
