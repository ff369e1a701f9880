"""The drain, in process with real workers: live utterances finish, then 1012; sessions
between utterances and new ones get 1012 at once; the drain timeout closes the rest."""

from __future__ import annotations

import random

from gateway.app import create_app
from tests.helpers.checksums import END, check_offline, check_online, config
from tests.helpers.loops import GatewayClient
from tests.helpers.session_frames import APP_SETTINGS as SETTINGS
from tests.helpers.session_frames import expect_error, receive_until_final, send, wait_until


def test_a_drain_lets_live_utterances_finish_then_closes_with_1012() -> None:
    app = create_app(SETTINGS)
    pcm = random.Random(4).randbytes(40_000)
    with (
        GatewayClient(app) as client,
        client.websocket_connect("/") as idle,
        client.websocket_connect("/") as live,
    ):
        assert client.portal is not None
        send(live, [config(chunk_size=[0, 5, 5]), pcm[:9600]])
        first = live.receive_json()
        assert client.get("/readyz").json()["sessions"]["active"] == 2
        drained = client.portal.start_task_soon(app.drain, 10.0)
        # Between utterances: closed at once. New sessions: refused.
        assert "shutting down" in expect_error(idle, 1012)["message"]
        assert client.get("/readyz").status_code == 503
        with client.websocket_connect("/") as late:
            expect_error(late, 1012)
        # Mid-utterance: every result, then the close.
        send(live, [pcm[9600:], END])
        check_online([first, *receive_until_final(live)], pcm, 9600)
        expect_error(live, 1012)
        drained.result(timeout=10)


def test_a_config_while_draining_waits_for_the_results_still_owed() -> None:
    app = create_app(SETTINGS)
    with GatewayClient(app) as client, client.websocket_connect("/") as ws:
        assert client.portal is not None
        send(ws, [config(mode="offline"), b"\x01\x02\x03\x04"])
        wait_until(lambda: client.get("/readyz").json()["sessions"]["active"] == 1)
        drained = client.portal.start_task_soon(app.drain, 10.0)
        wait_until(lambda: client.get("/readyz").json()["draining"] is True)
        send(ws, [END, config()])
        check_offline(receive_until_final(ws), b"\x01\x02\x03\x04")
        expect_error(ws, 1012)
        drained.result(timeout=10)


def test_sessions_still_live_at_the_drain_timeout_are_closed_with_1012() -> None:
    app = create_app(SETTINGS)
    with GatewayClient(app) as client, client.websocket_connect("/") as ws:
        assert client.portal is not None
        send(ws, [config(), b"\x00\x00"])
        wait_until(lambda: client.get("/readyz").json()["sessions"]["active"] == 1)
        drained = client.portal.start_task_soon(app.drain, 0.2)
        assert "drain timeout" in expect_error(ws, 1012)["message"]
        drained.result(timeout=10)
