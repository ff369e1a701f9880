"""Endpoint tests with Starlette's TestClient: the app in-process, real checksum workers."""

from __future__ import annotations

import json
import os
import random
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from gateway.app import StartupError, create_app
from shared.settings import PoolSettings
from tests.helpers.checksums import (
    END,
    check_offline,
    check_online,
    checksum,
    config,
    funasr_reads,
    random_frames,
    receive_until_is_final,
)
from tests.helpers.loops import GatewayClient
from tests.helpers.session_frames import APP_SETTINGS as SETTINGS
from tests.helpers.session_frames import Frame, expect_error, receive_until_final, send, wait_until


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with GatewayClient(create_app(SETTINGS)) as client:
        yield client


# --- bad input ---------------------------------------------------------------------

BAD_INPUT = [
    pytest.param(["hello"], 1008, "not valid JSON", id="text-not-json"),
    pytest.param(["[1, 2]"], 1008, "not a JSON object", id="json-not-an-object"),
    pytest.param([config(mode="3pass")], 1008, "mode", id="unknown-mode"),
    pytest.param([config(chunk_size=[5, "x", 5])], 1008, "chunk_size", id="chunk-size-list"),
    pytest.param([config(chunk_size="5,10")], 1008, "chunk_size", id="chunk-size-string"),
    pytest.param([config(chunk_size=[5, 0, 5])], 1008, "chunk_size", id="chunk-size-zero"),
    pytest.param([b"\x00\x01"], 1008, "before the config", id="audio-before-config"),
    pytest.param([config(audio_fs=96000)], 1008, "8000..48000", id="audio-fs-96000"),
    pytest.param([config(wav_format="mp3")], 1008, "pcm", id="wav-format-mp3"),
    pytest.param([config(), END, b"\x00\x01"], 1008, "after the end", id="binary-after-end"),
    pytest.param([json.dumps({"hello": 1})], 1008, "neither", id="neither-config-nor-end"),
    pytest.param([config(), b"\x00\x01\x02", END], 1008, "16-bit sample", id="odd-byte-at-end"),
    pytest.param([config(), bytes(65537)], 1009, "larger than", id="binary-too-large"),
    pytest.param([json.dumps({"hotwords": "x" * 5000})], 1009, "larger than", id="text-too-large"),
]


@pytest.mark.parametrize(("frames", "code", "fragment"), BAD_INPUT)
def test_bad_input_gets_an_error_frame_then_its_close_code(
    client: TestClient, frames: list[Frame], code: int, fragment: str
) -> None:
    with client.websocket_connect("/", subprotocols=["binary"]) as ws:
        send(ws, frames)
        error = expect_error(ws, code)
    assert fragment in error["message"]


def test_a_bad_session_does_not_disturb_another(client: TestClient) -> None:
    pcm = random.Random(7).randbytes(60000)
    with client.websocket_connect("/") as good:
        send(good, [config(chunk_size=[0, 5, 5]), pcm[:20001]])
        with client.websocket_connect("/") as bad:
            send(bad, [config(), b"\x00" * 10, "nonsense"])
            expect_error(bad, 1008)
        send(good, [pcm[20001:], END])
        check_online(receive_until_final(good), pcm, 9600)


# --- the protocol ------------------------------------------------------------------


def test_the_binary_subprotocol_is_accepted_when_offered(client: TestClient) -> None:
    with client.websocket_connect("/", subprotocols=["binary"]) as ws:
        assert ws.accepted_subprotocol == "binary"
    with client.websocket_connect("/") as ws:
        assert ws.accepted_subprotocol is None


@pytest.mark.parametrize("units", [1, 5, 10, 16])
def test_online_audio_is_cut_into_model_chunks_whatever_the_framing(
    client: TestClient, units: int
) -> None:
    rng = random.Random(units)
    pcm = rng.randbytes(2 * 40_000)
    with client.websocket_connect("/", subprotocols=["binary"]) as ws:
        send(ws, [config(chunk_size=[0, units, 5]), *random_frames(rng, pcm, 7000), END])
        results = receive_until_final(ws)
    check_online(results, pcm, units * 960 * 2)
    assert {message["wav_name"] for message in results} == {"test"}


def test_offline_decodes_the_whole_utterance_at_its_end(client: TestClient) -> None:
    rng = random.Random(2)
    pcm = rng.randbytes(2 * 50_000)
    with client.websocket_connect("/") as ws:
        send(ws, [config(mode="offline", wav_name="whole"), *random_frames(rng, pcm, 9000), END])
        results = receive_until_final(ws)
    check_offline(results, pcm)
    assert results[0]["wav_name"] == "whole"


def test_several_utterances_on_one_connection(client: TestClient) -> None:
    rng = random.Random(3)
    with client.websocket_connect("/") as ws:
        for mode, units in (("online", 10), ("offline", 10), ("online", 4)):
            pcm = rng.randbytes(2 * rng.randint(1000, 30_000))
            send(ws, [config(mode=mode, chunk_size=[0, units, 5])])
            send(ws, [*random_frames(rng, pcm, 5000), END])
            results = receive_until_final(ws)
            if mode == "online":
                check_online(results, pcm, units * 1920)
            else:
                check_offline(results, pcm)


def test_an_empty_utterance_still_gets_its_final_result(client: TestClient) -> None:
    with client.websocket_connect("/") as ws:
        send(ws, [config(), END])
        (final,) = receive_until_final(ws)
    assert final["text"] == checksum(b"")
    assert final["is_final"] is True


def test_an_end_with_nothing_open_sets_the_next_utterance_and_gets_only_its_ack(
    client: TestClient,
) -> None:
    with client.websocket_connect("/") as ws:
        ws.send_text(json.dumps({"mode": "offline", "is_speaking": False, "is_end": True}))
        assert funasr_reads(ws.receive_json()) == {
            "mode": "offline",
            "text": "",
            "wav_name": "microphone",
            "is_final": True,
            "is_end": True,
        }
        send(ws, [json.dumps({"is_speaking": True}), b"\x01\x02", END])
        (final,) = receive_until_final(ws)
    assert (final["mode"], final["text"]) == ("offline", checksum(b"\x01\x02"))


# --- limits ------------------------------------------------------------------------


def test_a_session_over_capacity_is_refused_at_once_with_1013() -> None:
    with GatewayClient(create_app(replace(SETTINGS, max_sessions=1))) as client:
        with client.websocket_connect("/") as first:
            send(first, [config(), END])
            receive_until_final(first)
            with client.websocket_connect("/", subprotocols=["binary"]) as second:
                error = expect_error(second, 1013)
            assert "maximum of 1 sessions" in error["message"]
            send(first, [config(), b"\x01\x02", END])
            assert receive_until_final(first)[-1]["text"] == checksum(b"\x01\x02")
        metrics = client.get("/metrics").text
    assert 'asr_sessions_refused_total{reason="over_capacity"} 1.0' in metrics


def test_a_silent_client_is_closed_after_the_idle_timeout() -> None:
    settings = replace(SETTINGS, idle_timeout_s=0.3, max_session_s=1.0)
    with GatewayClient(create_app(settings)) as client:
        with client.websocket_connect("/") as ws:
            send(ws, [config()])
            error = expect_error(ws, 1008)
        assert "ASR_IDLE_TIMEOUT" in error["message"]
        with client.websocket_connect("/") as ws:
            # More audio than the session may carry: 1 s is 32000 bytes.
            send(ws, [config(mode="offline"), bytes(20000), bytes(12002)])
            error = expect_error(ws, 1008)
        assert "1 s of audio" in error["message"]


def test_a_session_is_closed_at_its_maximum_length() -> None:
    app = create_app(replace(SETTINGS, max_session_s=0.3))
    with GatewayClient(app) as client, client.websocket_connect("/") as ws:
        send(ws, [config()])
        error = expect_error(ws, 1008)
    assert "maximum length" in error["message"]


def test_a_worker_that_dies_fails_its_sessions_with_1011_and_is_replaced() -> None:
    with GatewayClient(create_app(SETTINGS)) as client:
        (worker,) = client.get("/readyz").json()["workers"]
        with client.websocket_connect("/") as ws:
            send(ws, [config(chunk_size=[0, 1, 0]), bytes(1920)])
            assert ws.receive_json()["is_final"] is False  # the stream is live on it
            os.kill(worker["pid"], signal.SIGKILL)
            error = expect_error(ws, 1011)
        assert "died" in error["message"]
        wait_until(lambda: client.get("/readyz").status_code == 200)
        (replaced,) = client.get("/readyz").json()["workers"]
        assert replaced["restarts"] == 1
        assert replaced["pid"] != worker["pid"]
        with client.websocket_connect("/") as ws:
            send(ws, [config(), b"\x05\x06", END])
            assert receive_until_final(ws)[-1]["text"] == checksum(b"\x05\x06")
        metrics = client.get("/metrics").text
    assert 'asr_worker_restarts_total{device="cpu",model="checksum",worker="0"} 1.0' in metrics
    assert 'asr_session_errors_total{code="1011"} 1.0' in metrics


# --- HTTP --------------------------------------------------------------------------


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_lists_every_worker(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["ready"] is True
    assert body["draining"] is False
    assert body["sessions"] == {"active": 0, "max": SETTINGS.max_sessions}
    (worker,) = body["workers"]
    assert worker["device"] == "cpu"
    assert worker["model"] == "checksum (model-free)"
    assert worker["state"] == "ready"
    assert worker["active_streams"] == 0


def test_readyz_is_503_before_the_app_has_started() -> None:
    response = GatewayClient(create_app(SETTINGS)).get("/readyz")
    assert response.status_code == 503
    assert response.json()["ready"] is False


def test_metrics_count_sessions_chunks_and_worker_times(client: TestClient) -> None:
    with client.websocket_connect("/") as ws:
        send(ws, [config(mode="offline"), bytes(4000), END])
        receive_until_final(ws)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in (
        "asr_sessions_active 0.0",
        'asr_utterances_total{mode="offline"}',
        'asr_chunks_total{model="checksum",worker="0"}',
        'asr_queue_duration_seconds_bucket{le="0.0005",model="checksum",worker="0"}',
        'asr_compute_duration_seconds_count{model="checksum",worker="0"}',
        'asr_batch_size_bucket{le="1.0",model="checksum",worker="0"}',
        'asr_worker_ready{device="cpu",model="checksum",worker="0"} 1.0',
        'asr_worker_active_streams{device="cpu",model="checksum",worker="0"} 0.0',
        'asr_worker_restarts_total{device="cpu",model="checksum",worker="0"} 0.0',
    ):
        assert line in text
    sessions = next(line for line in text.splitlines() if line.startswith("asr_sessions_total"))
    assert float(sessions.split()[1]) >= 1


def test_a_model_that_cannot_load_fails_start_up_with_its_reason() -> None:
    settings = replace(SETTINGS, pool=PoolSettings(model="/nonexistent/model"))
    with (
        pytest.raises(StartupError, match="no such directory"),
        GatewayClient(create_app(settings)),
    ):
        pass


def test_bad_settings_fail_start_up_with_the_variable_named() -> None:
    app = create_app(environ={"ASR_MODEL": "checksum", "ASR_MAX_SESSIONS": "many"})
    with pytest.raises(StartupError, match="ASR_MAX_SESSIONS"), GatewayClient(app):
        pass


def test_a_bad_speakers_file_fails_start_up_before_any_model_loads(tmp_path: Path) -> None:
    speakers = tmp_path / "speakers.json"
    speakers.write_text('{"speakers": [{"name": "alice", "voiceprint": [0, 0]}]}')
    environ = {"ASR_MODEL": "/nonexistent/model", "ASR_SPEAKERS": str(speakers)}
    with (
        pytest.raises(StartupError, match=r"speakers\[0\]: a voiceprint is finite numbers"),
        GatewayClient(create_app(environ=environ)),
    ):
        pass


# --- 2pass ---------------------------------------------------------------------------


def loud(seconds: float, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return rng.integers(-12000, 12000, int(seconds * 16000), dtype=np.int16).astype("<i2").tobytes()


def quiet(seconds: float) -> bytes:
    return bytes(2 * int(seconds * 16000))


def test_2pass_sends_partials_then_each_sentence_decoded_whole(client: TestClient) -> None:
    """Two sentences split by a second of silence: each gets its streaming partials
    (2pass-online), then its whole audio decoded again (2pass-offline); only the last
    message is final; the sentences together are every byte sent."""
    first, gap, second = loud(1.5, 1), quiet(1.0), loud(1.2, 2)
    pcm = first + gap + second
    with client.websocket_connect("/") as ws:
        send(ws, [config(mode="2pass"), *random_frames(random.Random(3), pcm, 1920), END])
        messages = receive_until_is_final(ws)
    modes = [m["mode"] for m in messages]
    offline = [m for m in messages if m["mode"] == "2pass-offline"]
    assert len(offline) == 2
    assert set(modes) == {"2pass-online", "2pass-offline"}
    # Partials of sentence one, its offline pass, partials of sentence two, its offline pass.
    first_offline = modes.index("2pass-offline")
    assert modes[0] == "2pass-online"
    assert "2pass-online" in modes[first_offline + 1 :]
    assert modes[-1] == "2pass-offline"
    assert [m["is_final"] for m in messages] == [False] * (len(messages) - 1) + [True]
    # The checksum engine's texts: "<samples>:<crc32>" of each sentence's audio.
    cut = int(str(offline[0]["text"]).split(":")[0]) * 2
    assert offline[0]["text"] == checksum(pcm[:cut])
    assert offline[1]["text"] == checksum(pcm[cut:])
    assert len(first) <= cut <= len(first) + len(gap)  # the end lies in the silence
    # Each sentence's streaming pass saw exactly its bytes too: its last partial (the
    # checksum engine's running value) is the sentence's checksum. The passes' partials go
    # out in order, sentence one's then sentence two's, while sentence one's offline frame
    # comes whenever its decode is done (before or among sentence two's partials; the
    # frame after it repeats those, marked resent).
    partials = [
        str(m["text"]) for m in messages if m["mode"] == "2pass-online" and not m.get("resent")
    ]
    first_sentence_end = partials.index(str(offline[0]["text"]))
    assert partials[-1] == offline[1]["text"]
    assert first_sentence_end < len(partials) - 1
    assert all(int(text.split(":")[0]) * 2 <= cut for text in partials[:first_sentence_end])
    assert all(
        int(text.split(":")[0]) * 2 <= len(pcm) - cut for text in partials[first_sentence_end + 1 :]
    )


def test_2pass_is_the_default_mode_and_ends_a_sentence_at_the_end(client: TestClient) -> None:
    pcm = loud(0.8, 4)
    with client.websocket_connect("/") as ws:
        send(ws, [json.dumps({"is_speaking": True}), pcm, END])
        messages = receive_until_is_final(ws)
        # The connection serves the next utterance as usual.
        send(ws, [config(mode="online", chunk_size=[0, 10, 5]), pcm, END])
        online = receive_until_final(ws)
    assert messages[-1]["mode"] == "2pass-offline"
    assert messages[-1]["text"] == checksum(pcm)
    assert online[-1]["text"] == checksum(pcm)


def test_2pass_offline_pass_starts_a_preroll_before_the_speech(client: TestClient) -> None:
    """A sentence with a long silence before its speech: the streaming pass hears it all,
    the offline pass from ASR_SENTENCE_PREROLL_MS (300 ms) before the first loud frame."""
    lead, speech = quiet(1.5), loud(0.9, 5)
    pcm = lead + speech
    with client.websocket_connect("/") as ws:
        send(ws, [config(mode="2pass"), *random_frames(random.Random(4), pcm, 1920), END])
        messages = receive_until_is_final(ws)
    *partials, offline = messages
    assert partials[-1]["text"] == checksum(pcm)
    assert offline["text"] == checksum(pcm[len(lead) - 300 * 32 :])
