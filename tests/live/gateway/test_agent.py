"""HAProxy's agent check: the reply (sans I/O), and the port a running app answers on."""

from __future__ import annotations

import socket
import time

import pytest

from bench.common.net import free_port
from gateway.app import create_app
from gateway.ops.agent import Capacity, agent_reply
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.checksums import config
from tests.helpers.loops import GatewayClient


@pytest.mark.parametrize(
    ("capacity", "reply"),
    [
        (Capacity(ready=True, draining=False, active=0, places=64), "ready up 100%\n"),
        (Capacity(ready=True, draining=False, active=48, places=64), "ready up 25%\n"),
        # One place free is never weight 0 (rounded up), all taken is.
        (Capacity(ready=True, draining=False, active=63, places=64), "ready up 2%\n"),
        (Capacity(ready=True, draining=False, active=64, places=64), "ready up 0%\n"),
        (Capacity(ready=True, draining=False, active=70, places=64), "ready up 0%\n"),
        (Capacity(ready=False, draining=False, active=0, places=64), "down\n"),
        (Capacity(ready=True, draining=True, active=3, places=64), "drain\n"),
        (Capacity(ready=False, draining=True, active=0, places=64), "drain\n"),
    ],
)
def test_the_reply(capacity: Capacity, reply: str) -> None:
    assert agent_reply(capacity) == reply


def _ask(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        data = b""
        while chunk := sock.recv(64):
            data += chunk
    return data.decode()


def _until(port: int, reply: str) -> str:
    """The agent's reply once it is ``reply`` (the place is taken just after the accept)."""
    deadline = time.monotonic() + 5
    while (answer := _ask(port)) != reply and time.monotonic() < deadline:
        time.sleep(0.02)
    return answer


def test_a_running_app_answers_with_its_free_places_and_readyz_agrees() -> None:
    port = free_port()
    settings = GatewaySettings(
        pool=PoolSettings(model="checksum", devices=("cpu",)), max_sessions=2, agent_port=port
    )
    with GatewayClient(create_app(settings)) as client:
        assert _ask(port) == "ready up 100%\n"
        with client.websocket_connect("/") as first:
            first.send_text(config())
            assert _until(port, "ready up 50%\n") == "ready up 50%\n"
            assert client.get("/readyz").status_code == 200
            with client.websocket_connect("/") as second:
                second.send_text(config())
                assert _until(port, "ready up 0%\n") == "ready up 0%\n"
                full = client.get("/readyz")
                assert full.status_code == 503
                assert full.json()["full"] is True
