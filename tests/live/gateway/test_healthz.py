"""/healthz: 200 while the server serves or will again by itself, 503 once a pool cannot,
so that a process manager (systemd, Kubernetes' liveness probe) restarts the server."""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.loops import GatewayClient
from tests.helpers.session_frames import wait_until

pytestmark = pytest.mark.slow


def test_healthz_turns_503_once_the_workers_restarts_keep_failing(
    tiny_streaming_model: Path, tmp_path: Path
) -> None:
    """The model's files vanish (a volume unmounted) and the worker dies: every restart
    fails, and past ``unhealthy_after_s`` /healthz says so; a worker merely restarting,
    before that, is not a reason to restart the server."""
    model = tmp_path / "model"
    shutil.copytree(tiny_streaming_model, model)
    pool = PoolSettings(model=str(model), devices=("cpu",), unhealthy_after_s=1.0)
    with GatewayClient(create_app(GatewaySettings(pool=pool))) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        pid = client.get("/readyz").json()["workers"][0]["pid"]
        shutil.rmtree(model)
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: client.get("/readyz").status_code == 503)
        assert client.get("/healthz").status_code == 200  # restarting: not failing yet
        wait_until(lambda: client.get("/healthz").status_code == 503)
        body = client.get("/healthz").json()
        assert body["status"] == "failing"
        assert body["pool"] == "streaming"
        assert "every restart fails" in body["reason"]
