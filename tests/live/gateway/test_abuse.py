"""What one client may cost the others (issue #14), with Starlette's TestClient and real
checksum workers: the frame rate, silent sessions, waiting for a place; and the settings."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.limits.session_limits import MAX_EMPTY_UTTERANCES
from gateway.settings import GatewaySettings
from tests.helpers.checksums import END, checksum, config
from tests.helpers.loops import GatewayClient
from tests.helpers.session_frames import APP_SETTINGS as SETTINGS
from tests.helpers.session_frames import (
    expect_error,
    receive_until_final,
    send,
    wait_until,
)

# --- frames a second ------------------------------------------------------------------

# 400 frames at 20 a second would take 19 s (less the burst of 20): the TestClient sends
# them in a fraction of that, so only a free frame gets through them all.
FLOOD_RATE = 20.0
FLOOD_FRAMES = 400


@pytest.fixture(scope="module")
def flood_client() -> Iterator[TestClient]:
    with GatewayClient(create_app(replace(SETTINGS, max_frames_per_s=FLOOD_RATE))) as client:
        yield client


def test_a_flood_of_tiny_frames_is_closed_with_1008(flood_client: TestClient) -> None:
    with flood_client.websocket_connect("/", subprotocols=["binary"]) as ws:
        send(ws, [config(), *[b"\x01\x02"] * FLOOD_FRAMES])
        error = expect_error(ws, 1008)
    assert "ASR_MAX_FRAMES_PER_SECOND" in error["message"]
    metrics = flood_client.get("/metrics").text
    assert 'asr_session_errors_total{code="1008"}' in metrics


def test_a_flood_of_text_frames_is_closed_with_1008(flood_client: TestClient) -> None:
    with flood_client.websocket_connect("/") as ws:
        send(ws, [config(), *[json.dumps({"wav_name": "again"})] * FLOOD_FRAMES])
        error = expect_error(ws, 1008)
    assert "ASR_MAX_FRAMES_PER_SECOND" in error["message"]


def test_large_text_frames_cost_by_their_length() -> None:
    """JSON is parsed whatever it says: 64 KiB text frames came at 200 a second, and eight
    such sessions took other sessions' chunk latency from 3 to 340 ms (p50). Each now costs
    a token a KiB: at 200 tokens a second, three a second."""
    padding = json.dumps({"wav_name": "w", "note": "x" * 60_000})  # 60 KiB, no error in it
    settings = replace(SETTINGS, max_text_bytes=65536)  # the default
    with GatewayClient(create_app(settings)) as client, client.websocket_connect("/") as ws:
        send(ws, [config(), *[padding] * 10])
        error = expect_error(ws, 1008)
    assert "ASR_MAX_FRAMES_PER_SECOND" in error["message"]


def test_frames_of_20_ms_or_more_are_not_counted(flood_client: TestClient) -> None:
    # A fast upload: FunASR's Python client sends 60 ms frames 1 ms apart.
    pcm = bytes(range(256)) * (640 * FLOOD_FRAMES // 256)
    frames = [pcm[i : i + 640] for i in range(0, len(pcm), 640)]
    with flood_client.websocket_connect("/") as ws:
        send(ws, [config(mode="offline"), *frames, END])
        (final,) = receive_until_final(ws)
    assert final["text"] == checksum(pcm)


def test_frames_of_10_ms_still_count(flood_client: TestClient) -> None:
    # Half a token each: the burst of 20 pays for 40 of them, not for 400.
    with flood_client.websocket_connect("/") as ws:
        send(ws, [config(), *[bytes(320)] * FLOOD_FRAMES])
        expect_error(ws, 1008)


# --- silent sessions ----------------------------------------------------------------


def test_a_client_that_sends_no_config_is_closed_after_the_config_timeout() -> None:
    settings = replace(SETTINGS, config_timeout_s=0.3)
    with GatewayClient(create_app(settings)) as client:
        with client.websocket_connect("/") as ws:
            error = expect_error(ws, 1008)
        assert "ASR_CONFIG_TIMEOUT" in error["message"]
        assert client.get("/readyz").json()["sessions"]["active"] == 0


def test_frames_without_a_config_do_not_put_off_the_config_timeout() -> None:
    settings = replace(SETTINGS, config_timeout_s=0.3)
    stop, stopped = threading.Event(), threading.Event()
    with GatewayClient(create_app(settings)) as client, client.websocket_connect("/") as ws:

        def keep_sending() -> None:
            # An end with nothing open is no error: a frame every 50 ms, for up to 10 s.
            deadline = time.monotonic() + 10
            while not stop.is_set() and time.monotonic() < deadline:
                ws.send_text(json.dumps({"is_speaking": False}))
                time.sleep(0.05)
            stopped.set()

        sender = threading.Thread(target=keep_sending)
        sender.start()
        try:
            error = expect_error(ws, 1008)
            assert not stopped.is_set(), "closed only once the frames stopped"
        finally:
            stop.set()
            sender.join()
    assert "ASR_CONFIG_TIMEOUT" in error["message"]


def test_a_config_with_no_audio_is_closed_after_the_first_audio_timeout() -> None:
    settings = replace(SETTINGS, first_audio_timeout_s=0.3)
    with GatewayClient(create_app(settings)) as client:
        for mode in ("online", "offline", "2pass"):
            with client.websocket_connect("/") as ws:
                send(ws, [config(mode=mode)])
                error = expect_error(ws, 1008)
            assert "ASR_FIRST_AUDIO_TIMEOUT" in error["message"], mode
        assert client.get("/readyz").json()["sessions"]["active"] == 0


def test_the_first_audio_timeout_ends_with_the_first_audio() -> None:
    settings = replace(SETTINGS, config_timeout_s=0.2, first_audio_timeout_s=0.2)
    with GatewayClient(create_app(settings)) as client, client.websocket_connect("/") as ws:
        send(ws, [config(), b"\x01\x02"])
        time.sleep(0.6)  # past both timeouts, within the idle timeout (10 s)
        send(ws, [b"\x03\x04", END])
        assert receive_until_final(ws)[-1]["text"] == checksum(b"\x01\x02\x03\x04")
        # The next utterance's config starts the first-audio timeout again.
        send(ws, [config()])
        assert "ASR_FIRST_AUDIO_TIMEOUT" in expect_error(ws, 1008)["message"]


def test_an_empty_utterance_is_not_waiting_for_audio() -> None:
    settings = replace(SETTINGS, first_audio_timeout_s=0.2)
    with GatewayClient(create_app(settings)) as client, client.websocket_connect("/") as ws:
        send(ws, [config(), END])
        assert receive_until_final(ws)[-1]["text"] == checksum(b"")
        time.sleep(0.5)
        send(ws, [config(), b"\x05\x06", END])
        assert receive_until_final(ws)[-1]["text"] == checksum(b"\x05\x06")


def test_configs_and_ends_without_audio_do_not_put_off_the_idle_timeout() -> None:
    """Configs and ends cost a client nothing: a cycle of them every 100 ms held a place
    for ever. Only audio (20 ms of it) or a result waited for puts the deadline off."""
    settings = replace(SETTINGS, idle_timeout_s=0.5)
    stop, stopped = threading.Event(), threading.Event()
    with GatewayClient(create_app(settings)) as client, client.websocket_connect("/") as ws:

        def keep_cycling() -> None:
            deadline = time.monotonic() + 10
            while not stop.is_set() and time.monotonic() < deadline:
                send(ws, [config(), END])
                time.sleep(0.1)
            stopped.set()

        sender = threading.Thread(target=keep_cycling)
        sender.start()
        try:
            error = expect_error(ws, 1008)
            assert not stopped.is_set(), "closed only once the frames stopped"
        finally:
            stop.set()
            sender.join()
    assert "ASR_IDLE_TIMEOUT" in error["message"]


def test_audio_puts_off_the_idle_timeout() -> None:
    settings = replace(SETTINGS, idle_timeout_s=0.5)
    with GatewayClient(create_app(settings)) as client, client.websocket_connect("/") as ws:
        send(ws, [config()])
        for _ in range(10):  # 1 s in all, 20 ms of audio every 100 ms
            send(ws, [bytes(640)])
            time.sleep(0.1)
        send(ws, [END])
        assert receive_until_final(ws)[-1]["text"] == checksum(bytes(6400))


def test_utterances_without_audio_are_bounded_per_session() -> None:
    with GatewayClient(create_app(SETTINGS)) as client, client.websocket_connect("/") as ws:
        for _ in range(MAX_EMPTY_UTTERANCES):
            send(ws, [config(), bytes(638), END])  # less than 20 ms: empty
            receive_until_final(ws)
        send(ws, [config(), END])
        error = expect_error(ws, 1008)
    assert error["message"] == (
        f"more than {MAX_EMPTY_UTTERANCES} utterances ended with no audio (less than 20 ms)"
    )


# --- waiting for a place ------------------------------------------------------------


def _metric(client: TestClient, name: str) -> float:
    text = client.get("/metrics").text
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, name
    return float(match.group(1))


def test_a_session_waits_for_a_place_and_one_over_the_queue_is_refused_at_once() -> None:
    settings = replace(SETTINGS, max_sessions=1, admission_wait_s=30.0, admission_queue=1)
    with GatewayClient(create_app(settings)) as client:
        with client.websocket_connect("/") as first:
            send(first, [config(), b"\x01\x02"])
            with client.websocket_connect("/") as waiting:
                # Its frames wait in the server meanwhile.
                send(waiting, [config(), b"\x03\x04", END])
                wait_until(lambda: _metric(client, "asr_admission_waiters") == 1.0)
                with client.websocket_connect("/") as third:
                    error = expect_error(third, 1013)
                assert "1 more are waiting" in error["message"]
                send(first, [END])
                assert receive_until_final(first)[-1]["text"] == checksum(b"\x01\x02")
                first.close()
                assert receive_until_final(waiting)[-1]["text"] == checksum(b"\x03\x04")
        metrics = client.get("/metrics").text
    assert 'asr_admission_wait_seconds_count{outcome="admitted"} 2.0' in metrics
    assert 'asr_admission_wait_seconds_count{outcome="refused"} 1.0' in metrics
    assert "asr_admission_waiters 0.0" in metrics
    assert 'asr_sessions_refused_total{reason="over_capacity"} 1.0' in metrics


def test_a_waiter_is_refused_with_1013_when_no_place_comes_free() -> None:
    settings = replace(SETTINGS, max_sessions=1, admission_wait_s=0.3)
    with GatewayClient(create_app(settings)) as client:
        with client.websocket_connect("/") as first:
            send(first, [config(), b"\x01\x02"])
            with client.websocket_connect("/") as second:
                error = expect_error(second, 1013)
            assert "ASR_ADMISSION_WAIT" in error["message"]
            send(first, [END])
            receive_until_final(first)
        metrics = client.get("/metrics").text
    assert 'asr_admission_wait_seconds_count{outcome="refused"} 1.0' in metrics
    # It waited its 0.3 s: not in the histogram's first buckets.
    assert 'asr_admission_wait_seconds_bucket{le="0.1",outcome="refused"} 0.0' in metrics


def test_a_drain_refuses_waiters_with_1012_at_once() -> None:
    settings = replace(SETTINGS, max_sessions=1, admission_wait_s=3600.0)
    app = create_app(settings)
    with GatewayClient(app) as client, client.websocket_connect("/") as first:
        assert client.portal is not None
        send(first, [config(), b"\x01\x02"])
        with client.websocket_connect("/") as waiting:
            wait_until(lambda: _metric(client, "asr_admission_waiters") == 1.0)
            drained = client.portal.start_task_soon(app.drain, 10.0)
            assert "shutting down" in expect_error(waiting, 1012)["message"]
        send(first, [END])
        assert receive_until_final(first)[-1]["text"] == checksum(b"\x01\x02")
        expect_error(first, 1012)
        drained.result(timeout=10)


# --- settings -----------------------------------------------------------------------


def test_the_defaults() -> None:
    settings = GatewaySettings.from_env({})
    assert settings.max_frames_per_s == 200.0
    assert settings.config_timeout_s == 10.0
    assert settings.first_audio_timeout_s == 30.0
    assert settings.send_timeout_s == 10.0
    assert settings.admission_wait_s == 0.0
    assert settings.admission_queue is None
    assert settings.admission_queue_size == settings.max_sessions == 64


def test_every_variable_is_read() -> None:
    settings = GatewaySettings.from_env(
        {
            "ASR_MAX_SESSIONS": "8",
            "ASR_MAX_FRAMES_PER_SECOND": "50",
            "ASR_CONFIG_TIMEOUT": "3",
            "ASR_FIRST_AUDIO_TIMEOUT": "4.5",
            "ASR_SEND_TIMEOUT": "7",
            "ASR_ADMISSION_WAIT": "2.5",
            "ASR_ADMISSION_QUEUE": "3",
        }
    )
    assert settings.max_frames_per_s == 50.0
    assert settings.config_timeout_s == 3.0
    assert settings.first_audio_timeout_s == 4.5
    assert settings.send_timeout_s == 7.0
    assert settings.admission_wait_s == 2.5
    assert settings.admission_queue_size == 3
    assert GatewaySettings.from_env({"ASR_MAX_SESSIONS": "8"}).admission_queue_size == 8


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ASR_MAX_FRAMES_PER_SECOND", "0"),
        ("ASR_MAX_FRAMES_PER_SECOND", "inf"),
        ("ASR_CONFIG_TIMEOUT", "0"),
        ("ASR_FIRST_AUDIO_TIMEOUT", "-1"),
        ("ASR_SEND_TIMEOUT", "soon"),
        ("ASR_ADMISSION_WAIT", "-1"),
        ("ASR_ADMISSION_WAIT", "nan"),
        ("ASR_ADMISSION_QUEUE", "0"),
    ],
)
def test_a_bad_value_names_its_variable(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        GatewaySettings.from_env({name: value})
