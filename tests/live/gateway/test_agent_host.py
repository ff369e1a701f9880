"""Where the agent port listens: the server's host (``python -m gateway --host``),
``ASR_AGENT_HOST`` when set, else the loopback (bare uvicorn does not tell its app its
host). Listening on every interface whatever ``--host`` says would open the port to
whoever reaches the machine. 127.0.0.2 is another address of the loopback interface: a
socket bound to 127.0.0.1 refuses it, one bound to 0.0.0.0 answers it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bench.common.gateway import GATEWAY, serve
from bench.common.net import free_port
from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.loops import GatewayClient

OTHER = "127.0.0.2"


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            return sock.recv(64).startswith(b"ready up")
    except ConnectionRefusedError:
        return False


def settings(port: int) -> GatewaySettings:
    pool = PoolSettings(model="checksum", devices=("cpu",))
    return GatewaySettings(pool=pool, agent_port=port)


def test_by_default_the_agent_listens_on_the_loopback_only() -> None:
    port = free_port()
    with GatewayClient(create_app(settings(port))):
        assert answers("127.0.0.1", port)
        assert not answers(OTHER, port)


def test_the_agent_listens_where_the_server_does() -> None:
    port = free_port()
    with GatewayClient(create_app(settings(port), server_host=OTHER)):
        assert answers(OTHER, port)
        assert not answers("127.0.0.1", port)


def test_asr_agent_host_wins_over_the_servers_host() -> None:
    port = free_port()
    app = create_app(
        environ={
            "ASR_MODEL": "checksum",
            "ASR_DEVICES": "cpu",
            "ASR_AGENT_PORT": str(port),
            "ASR_AGENT_HOST": OTHER,
        },
        server_host="127.0.0.1",
    )
    with GatewayClient(app):
        assert answers(OTHER, port)
        assert not answers("127.0.0.1", port)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
async def test_python_m_gateway_puts_the_agent_on_its_host(host: str, tmp_path: Path) -> None:
    port = free_port()
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_AGENT_PORT": str(port)}
    async with serve(env, tmp_path / "server.log", entry=(*GATEWAY, "--host", host)) as server:
        assert answers("127.0.0.1", port)
        assert answers(OTHER, port) == (host == "0.0.0.0")
        assert f"answering HAProxy's agent check on {host} port {port}" in server.output()
