"""/healthz says 503 whenever the app is not serving, with the reason: not started yet, a
fault that ended serving, shutting down. A 200 from a process that serves nothing keeps
every process manager from restarting it."""

from __future__ import annotations

from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.loops import GatewayClient

SETTINGS = GatewaySettings(pool=PoolSettings(model="checksum", devices=("cpu",)))


def test_healthz_is_503_before_start_up_200_while_serving_and_503_after() -> None:
    client = GatewayClient(create_app(SETTINGS))  # outside ``with``: no lifespan
    before = client.get("/healthz")
    assert (before.status_code, before.json()) == (
        503,
        {"status": "not serving", "reason": "not started"},
    )
    with client:
        serving = client.get("/healthz")
        assert (serving.status_code, serving.json()) == (200, {"status": "ok"})
    after = client.get("/healthz")
    assert (after.status_code, after.json()) == (
        503,
        {"status": "not serving", "reason": "shutting down"},
    )


def test_a_shutdown_is_not_a_lost_serving() -> None:
    app = create_app(SETTINGS)
    with GatewayClient(app):
        assert app.serving_lost() is None
    assert app.serving_lost() is None  # python -m gateway exits 0, not 1
