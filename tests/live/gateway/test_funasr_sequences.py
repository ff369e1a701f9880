"""The exact message sequences of FunASR's own clients, as endpoint tests.

Each test sends what one real client sends (read from its code: FunASR @3c58cb5's
``funasr_wss_client.py`` and ``runtime/html5/static/main.js``, funasr-client 0.1.6), in its
order and framing, and checks what that client waits for. The clients themselves run
against a real uvicorn in ``tests/live/clients/``. Every frame received is checked to be one
that FunASR's clients read without a fault (``funasr_reads``).
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import time
import wave
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import soxr
from starlette.testclient import TestClient, WebSocketTestSession
from starlette.websockets import WebSocketDisconnect

from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.checksums import checksum, funasr_reads
from tests.helpers.loops import GatewayClient

SETTINGS = GatewaySettings(
    pool=PoolSettings(model="checksum", devices=("cpu",)),
    idle_timeout_s=10.0,  # a session the server forgets fails the test instead of hanging it
    max_session_s=60.0,
)
MODES = ["online", "offline", "2pass"]
# funasr_wss_client.py's frames: 60 * chunk_size[1] / chunk_interval ms of 16 kHz PCM.
PYTHON_CLIENT_FRAME = int(60 * 10 / 10 / 1000 * 16000 * 2)
HTML5_FRAME_SAMPLES = 960  # main.js: "chunk_size=960; // for asr chunk_size [5, 10, 5]"
ACK_END = json.dumps({"is_speaking": False, "is_end": True})


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with GatewayClient(create_app(SETTINGS)) as client:
        yield client


def receive(ws: WebSocketTestSession) -> dict[str, Any]:
    message = funasr_reads(ws.receive_json())
    assert message.get("type") != "error", message
    return message


def receive_until(ws: WebSocketTestSession, key: str) -> list[dict[str, Any]]:
    """Messages up to and including the first whose ``key`` is true."""
    messages = [receive(ws)]
    while not messages[-1].get(key):
        messages.append(receive(ws))
    return messages


def final_text(messages: list[dict[str, Any]], mode: str) -> str:
    """The utterance's text as FunASR's clients assemble it: online, the partials' deltas
    and the final; offline, the one result; 2pass, the 2pass-offline sentences."""
    if mode == "online":
        texts = [str(m["text"]) for m in messages if m["mode"] == "online"]
        return texts[-1]  # the checksum engine's text is over all the audio so far
    wanted = "offline" if mode == "offline" else "2pass-offline"
    return "".join(m["text"] for m in messages if m["mode"] == wanted)


def wait_until_bound(client: TestClient, streams: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while client.get("/readyz").json()["workers"][0]["active_streams"] != streams:
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def html5_frame(mode: str, **fields: object) -> str:
    """The HTML5 page's text frames: its config at connect (wsconnecter.js) and its Stop
    frame (main.js) carry the same fields; ``is_speaking`` and extras set the rest."""
    frame = {"chunk_size": [5, 10, 5], "wav_name": "h5", "chunk_interval": 10, "mode": mode}
    return json.dumps({**frame, **fields}, ensure_ascii=False)


def python_client_config(mode: str, wav_name: str, audio_fs: int = 16000) -> str:
    """What funasr_wss_client.py's record_from_scp sends first, field for field."""
    return json.dumps(
        {
            "mode": mode,
            "chunk_size": [5, 10, 5],
            "chunk_interval": 10,
            "encoder_chunk_look_back": 4,
            "decoder_chunk_look_back": 0,
            "audio_fs": audio_fs,  # the WAV file's own rate
            "wav_name": wav_name,
            "wav_format": "pcm",
            "is_speaking": True,
            "hotwords": "阿里巴巴,达摩院",  # its hotword file's first words, comma-joined
            "itn": True,
        },
        ensure_ascii=False,
    )


@pytest.mark.parametrize("mode", MODES)
def test_python_client_several_files_each_acknowledged_after_its_results(
    client: TestClient, mode: str
) -> None:
    rng = random.Random(mode)
    with client.websocket_connect("/", subprotocols=["binary"]) as ws:
        for index in range(3):
            pcm = rng.randbytes(2 * rng.randint(8000, 30000))
            name = f"file{index}"
            ws.send_text(python_client_config(mode, name))
            for start in range(0, len(pcm), PYTHON_CLIENT_FRAME):
                ws.send_bytes(pcm[start : start + PYTHON_CLIENT_FRAME])
            ws.send_text(ACK_END)
            *results, ack = receive_until(ws, "is_end")
            assert ack == {
                "mode": mode,
                "text": "",
                "wav_name": name,
                "is_final": True,
                "is_end": True,
            }
            assert final_text(results, mode) == checksum(pcm)
            assert [m["is_final"] for m in results][-1] is True  # the last result, then ack
            assert {m["wav_name"] for m in results} == {name}


@pytest.mark.parametrize("mode", MODES)
def test_html5_mic_mode_stop_frame_with_config_fields_gets_the_final_result(
    client: TestClient, mode: str
) -> None:
    rng = random.Random(7)
    pcm = rng.randbytes(2 * 40000)
    with client.websocket_connect("/") as ws:  # browsers offer no subprotocol
        ws.send_text(html5_frame(mode, is_speaking=True, itn=False))
        frame = 2 * HTML5_FRAME_SAMPLES
        whole = len(pcm) // frame * frame
        for start in range(0, whole, frame):
            ws.send_bytes(pcm[start : start + frame])
        ws.send_bytes(pcm[whole:])  # stop(): what is left in sampleBuf, then the frame below
        ws.send_text(html5_frame(mode, is_speaking=False))
        results = receive_until(ws, "is_final")
        assert final_text(results, mode) == checksum(pcm)
        assert all(m["wav_name"] == "h5" for m in results)
        # Nothing else was owed: the next thing the server sends is what we ask for now.
        ws.send_text(ACK_END)
        assert receive(ws)["is_end"] is True


def test_html5_file_mode_sends_the_whole_file_and_closes_on_the_final(
    client: TestClient,
) -> None:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes(random.Random(3).randbytes(2 * 24000))
    file_bytes = buffer.getvalue()  # the page sends the header as PCM too, as it is
    with client.websocket_connect("/") as ws:
        config = html5_frame(  # getAsrMode() is offline in file mode
            "offline",
            is_speaking=True,
            itn=False,
            wav_format="PCM",
            audio_fs=16000,
            hotwords=json.dumps({"阿里巴巴": 20}, ensure_ascii=False),
        )
        ws.send_text(config)
        whole = len(file_bytes) // 960 * 960  # a Uint8Array cut into 960 bytes
        for start in range(0, whole, 960):
            ws.send_bytes(file_bytes[start : start + 960])
        ws.send_bytes(file_bytes[whole:])
        ws.send_text(html5_frame("offline", is_speaking=False))
        (final,) = receive_until(ws, "is_final")
    assert (final["mode"], final["text"]) == ("offline", checksum(file_bytes))


@pytest.mark.parametrize("rate", [8000, 44100])
@pytest.mark.parametrize("mode", MODES)
def test_a_wav_files_own_rate_is_resampled_to_16khz(
    client: TestClient, mode: str, rate: int
) -> None:
    # funasr_wss_client.py and the HTML5 page send a WAV's rate as audio_fs, its samples raw.
    samples = np.random.default_rng(rate).normal(0, 3000, size=rate * 2).astype("<i2")
    data = samples.tobytes()
    with client.websocket_connect("/") as ws:
        ws.send_text(
            python_client_config(mode, "w").replace('"audio_fs": 16000', f'"audio_fs": {rate}')
        )
        frame = int(60 / 1000 * rate) * 2
        for start in range(0, len(data), frame):
            ws.send_bytes(data[start : start + frame])
        ws.send_text(ACK_END)
        *results, ack = receive_until(ws, "is_end")
    expected = len(soxr.resample(samples, rate, 16000, quality="HQ"))
    assert expected == 32000
    assert int(final_text(results, mode).split(":")[0]) == expected
    assert ack["is_final"] is True


@pytest.mark.parametrize("mode", MODES)
def test_cpp_client_sequence_closes_on_the_one_is_final(client: TestClient, mode: str) -> None:
    # funasr-wss-client-2pass.cpp: svs_* and itn in its config, hotwords as a JSON string,
    # 102400-sample frames, {"is_speaking": false}, then it closes on is_final (1001).
    pcm = random.Random(11).randbytes(2 * 250000)
    with client.websocket_connect("/") as ws:
        ws.send_text(
            json.dumps(
                {
                    "mode": mode,
                    "chunk_size": [5, 10, 5],
                    "wav_name": "wav-id",
                    "wav_format": "pcm",
                    "audio_fs": 16000,
                    "is_speaking": True,
                    "itn": True,
                    "svs_itn": True,
                    "hotwords": json.dumps({"阿里巴巴": 20}),
                }
            )
        )
        for start in range(0, len(pcm), 204800):
            ws.send_bytes(pcm[start : start + 204800])
        ws.send_text(json.dumps({"is_speaking": False}))
        results = receive_until(ws, "is_final")
        ws.close(1001)
    assert final_text(results, mode) == checksum(pcm)
    assert [m["is_final"] for m in results].count(True) == 1


def test_funasr_client_closing_sequence_repeats_the_end_without_an_error(
    client: TestClient,
) -> None:
    pcm = random.Random(5).randbytes(2 * 16000)
    with client.websocket_connect("/", subprotocols=["binary"]) as ws:
        ws.send_text(json.dumps({"mode": "2pass", "is_speaking": True, "chunk_size": [5, 10, 5]}))
        ws.send_bytes(pcm)
        ws.send_text(json.dumps({"is_speaking": False}))  # signal_close()
        results = receive_until(ws, "is_final")
        ws.send_text(json.dumps({"is_speaking": False}))  # close() sends it again
        ws.send_text(ACK_END)  # (ours: shows that the repeat got no answer at all)
        ack = receive(ws)
        ws.close(1000)
    assert final_text(results, "2pass") == checksum(pcm)
    assert ack["is_end"] is True


def test_an_end_with_nothing_open_is_acknowledged(client: TestClient) -> None:
    with client.websocket_connect("/") as ws:
        ws.send_text(ACK_END)
        assert receive(ws) == {
            "mode": "2pass",
            "text": "",
            "wav_name": "microphone",
            "is_final": True,
            "is_end": True,
        }


def test_a_wav_name_set_mid_utterance_names_the_results_from_then_on(
    client: TestClient,
) -> None:
    chunk = random.Random(9).randbytes(19200)  # one 600 ms chunk
    with client.websocket_connect("/") as ws:
        ws.send_text(json.dumps({"mode": "online", "wav_name": "a", "is_speaking": True}))
        ws.send_bytes(chunk)
        assert receive(ws)["wav_name"] == "a"
        ws.send_text(json.dumps({"wav_name": "b", "mode": "offline", "is_speaking": True}))
        ws.send_bytes(chunk)
        ws.send_text(ACK_END)
        *results, ack = receive_until(ws, "is_end")
    assert [(m["mode"], m["wav_name"]) for m in results] == [("online", "b")] * 2
    assert (ack["mode"], ack["wav_name"]) == ("online", "b")


def test_an_utterance_that_fails_after_is_end_is_acknowledged_failed_then_closed() -> None:
    with GatewayClient(create_app(SETTINGS)) as client:
        (worker,) = client.get("/readyz").json()["workers"]
        with client.websocket_connect("/") as ws:
            ws.send_text(json.dumps({"mode": "offline", "wav_name": "w", "is_speaking": True}))
            ws.send_bytes(bytes(3200))
            os.kill(worker["pid"], signal.SIGSTOP)  # it cannot answer before it dies
            try:
                ws.send_text(ACK_END)
                # An offline utterance's pool stream opens at its end: once the parent has
                # bound it, the session has taken the end (the worker is not asked).
                wait_until_bound(client, streams=1)
            finally:
                os.kill(worker["pid"], signal.SIGKILL)
            ack = funasr_reads(ws.receive_json())
            error = funasr_reads(ws.receive_json())
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_text()
    assert ack["is_end"] is True
    assert (ack["is_final"], ack["wav_name"], ack["mode"]) == (False, "w", "offline")
    assert "died" in ack["error"]
    assert (error["type"], error["code"], error["text"]) == ("error", 1011, "")
    assert closed.value.code == 1011
