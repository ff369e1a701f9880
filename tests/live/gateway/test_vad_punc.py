"""2pass with FunASR's companions: FSMN-VAD sentence ends, CT-Transformer punctuation.

Real worker pools with the synthetic models (``workers.models.synthetic.companions``); every
expected value is computed with funasr's own ``AutoModel`` on the same audio.
"""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from starlette.testclient import TestClient, WebSocketTestSession

from gateway.app import create_app
from gateway.audio.endpointer import EndpointSettings
from gateway.funasr.config import SessionConfig
from gateway.session.utterance.two_pass_vad import piece_bytes
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from tests.helpers.checksums import END, checksum, config, receive_until_is_final
from tests.helpers.loops import GatewayClient
from tests.helpers.session_frames import expect_error, wait_until
from tests.helpers.vad import SENTENCE_ENDS, funasr_vad, spoken
from workers.engines.paraformer.streaming import load_automodel, to_float

pytestmark = pytest.mark.slow

FRAME_BYTES = 3200  # 100 ms: the session sends the VAD whole pieces of 200 ms across them
PREROLL_MS = 300


@pytest.fixture(scope="module")
def vad_client(tiny_vad_model: Path) -> Iterator[TestClient]:
    """Checksum streaming pool (which also decodes the 2pass offline pass) and a VAD pool."""
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    vad = replace(streaming, model=str(tiny_vad_model), kind=Role.VAD)
    settings = GatewaySettings(
        pool=streaming,
        companions={Role.VAD: vad},
        endpoint=EndpointSettings(preroll_ms=PREROLL_MS),
        idle_timeout_s=30.0,
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def punc_client(tiny_offline_model: Path, tiny_punc_model: Path) -> Iterator[TestClient]:
    """Checksum streaming pool; the offline model with punctuation."""
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(
        streaming, model=str(tiny_offline_model), kind=Role.OFFLINE, punc_model=str(tiny_punc_model)
    )
    settings = GatewaySettings(
        pool=streaming, companions={Role.OFFLINE: offline}, idle_timeout_s=30.0
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


def two_pass(ws: WebSocketTestSession, pcm: bytes) -> list[dict[str, Any]]:
    ws.send_text(config(mode="2pass"))
    for start in range(0, len(pcm), FRAME_BYTES):
        ws.send_bytes(pcm[start : start + FRAME_BYTES])
    ws.send_text(END)
    return receive_until_is_final(ws)


def expected_vad_sentences(model_dir: Path, pcm: bytes) -> list[tuple[bytes, int | None]]:
    """Each sentence's bytes and its speech start (bytes into it), as the session must cut
    them: after the piece in which funasr's VAD, fed the same pieces, reports an end. The
    session sends the VAD whole pieces, a third of a 600 ms chunk each, whatever the frames
    (gateway.session.utterance.two_pass_vad)."""
    vad = load_automodel(str(model_dir), "cpu", 1)
    cache: dict[str, Any] = {}
    sentences: list[tuple[bytes, int | None]] = []
    origin, start_at = 0, None
    piece = piece_bytes(SessionConfig().chunk_bytes)
    for start in range(0, len(pcm), piece):
        frame = np.frombuffer(pcm[start : start + piece], "<i2")
        for beg, end in funasr_vad(vad, frame, cache):
            if beg != -1:
                start_at = beg * 32
            if end != -1:
                cut = start + len(frame) * 2
                speech = None if start_at is None else max(0, start_at - origin)
                sentences.append((pcm[origin:cut], speech))
                origin, start_at = cut, None
    sentences.append((pcm[origin:], None if start_at is None else max(0, start_at - origin)))
    return sentences


def offline_part(sentence: bytes, speech_start: int | None) -> bytes:
    if speech_start is None:
        return sentence
    return sentence[max(0, speech_start - PREROLL_MS * 32) :]


def test_2pass_sentences_end_where_the_vad_says(
    vad_client: TestClient, tiny_vad_model: Path
) -> None:
    """Three sentences; the VAD's ends cut the audio, each sentence's streaming pass saw
    exactly its bytes, and its offline pass the same bytes from the pre-roll before its
    speech start on (the checksum engine's texts say which bytes each pass got)."""
    audio = spoken(
        5,
        ("quiet", 1.5),
        ("speech", 1.5),
        ("quiet", 2.5),
        ("speech", 1.0),
        ("quiet", 1.2),
        ("speech", 0.8),
    )
    pcm = audio.astype("<i2").tobytes()
    expected = expected_vad_sentences(tiny_vad_model, pcm)
    assert len(expected) == 3
    with vad_client.websocket_connect("/") as ws:
        messages = two_pass(ws, pcm)
    offline = [m for m in messages if m["mode"] == "2pass-offline"]
    last_partials = [messages[i - 1]["text"] for i, m in enumerate(messages) if m in offline]
    assert last_partials == [checksum(sentence) for sentence, _ in expected]
    assert [m["text"] for m in offline] == [checksum(offline_part(*each)) for each in expected]
    # The first two sentences had silence before their speech beyond the pre-roll.
    assert [len(offline_part(*each)) < len(each[0]) for each in expected] == [True, True, False]
    assert [m["is_final"] for m in offline] == [False, False, True]


def test_readyz_and_metrics_show_the_vad_workers(
    vad_client: TestClient, tiny_vad_model: Path
) -> None:
    body = vad_client.get("/readyz").json()
    assert [w["engine"] for w in body["vad_workers"]] == ["fsmn-vad"]
    # A directory's model is named by its last part.
    ready = f'asr_worker_ready{{device="cpu",model="{tiny_vad_model.name}",worker="vad-0"}} 1.0'
    assert ready in vad_client.get("/metrics").text


def test_online_sessions_do_not_use_the_vad(vad_client: TestClient) -> None:
    pcm = spoken(6, ("speech", 0.7)).astype("<i2").tobytes()
    with vad_client.websocket_connect("/") as ws:
        ws.send_text(config(mode="online"))
        ws.send_bytes(pcm)
        ws.send_text(END)
        messages = receive_until_is_final(ws)
    assert messages[-1]["text"] == checksum(pcm)
    assert vad_client.get("/readyz").json()["vad_workers"][0]["active_streams"] == 0


def test_a_vad_worker_that_dies_fails_its_2pass_sessions_with_1011_and_is_replaced(
    vad_client: TestClient,
) -> None:
    (worker,) = vad_client.get("/readyz").json()["vad_workers"]
    pcm = spoken(9, ("speech", 1.0)).astype("<i2").tobytes()
    with vad_client.websocket_connect("/") as ws:
        ws.send_text(config(mode="2pass"))
        ws.send_bytes(pcm[: 7 * FRAME_BYTES])  # past the first 600 ms chunk
        assert ws.receive_json()["mode"] == "2pass-online"  # the session is live
        os.kill(worker["pid"], signal.SIGKILL)
        ws.send_bytes(pcm[7 * FRAME_BYTES :])  # the forwarder needs the VAD for these
        error = expect_error(ws, 1011)
    assert "died" in error["message"]
    wait_until(lambda: vad_client.get("/readyz").status_code == 200)
    (replaced,) = vad_client.get("/readyz").json()["vad_workers"]
    assert replaced["restarts"] == 1
    assert replaced["pid"] != worker["pid"]
    with vad_client.websocket_connect("/") as ws:
        messages = two_pass(ws, pcm)
    assert messages[-1]["mode"] == "2pass-offline"
    assert messages[-1]["text"] == checksum(pcm)  # the speech starts at once: all of it


def punctuated(offline_dir: Path, punc_dir: Path, audio: np.ndarray) -> str:
    text = load_automodel(str(offline_dir), "cpu", 1).generate(
        input=to_float(audio), disable_pbar=True
    )[0]["text"]
    result = load_automodel(str(punc_dir), "cpu", 1).generate(input=text, disable_pbar=True)
    return str(result[0]["text"])


def test_offline_results_are_punctuated(
    punc_client: TestClient, tiny_offline_model: Path, tiny_punc_model: Path
) -> None:
    audio = spoken(7, ("speech", 2.0))
    expected = punctuated(tiny_offline_model, tiny_punc_model, audio)
    assert expected[-1] in SENTENCE_ENDS
    with punc_client.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline"))
        ws.send_bytes(audio.astype("<i2").tobytes())
        ws.send_text(END)
        message = ws.receive_json()
    assert message["mode"] == "offline"
    assert message["text"] == expected
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, 16000, format="WAV", subtype="PCM_16")
    response = punc_client.post(
        "/v1/transcribe", files={"file": ("a.wav", buffer.getvalue(), "audio/wav")}
    )
    assert response.status_code == 200, response.json()
    assert response.json()["text"] == expected


def test_2pass_offline_pass_is_punctuated(
    punc_client: TestClient, tiny_offline_model: Path, tiny_punc_model: Path
) -> None:
    audio = spoken(8, ("speech", 1.2))
    with punc_client.websocket_connect("/") as ws:
        messages = two_pass(ws, audio.astype("<i2").tobytes())
    assert messages[-1]["mode"] == "2pass-offline"
    assert messages[-1]["text"] == punctuated(tiny_offline_model, tiny_punc_model, audio)


def test_settings_from_env_build_the_vad_pool_and_punctuation() -> None:
    settings = GatewaySettings.from_env(
        {
            "ASR_MODEL": "checksum",
            "ASR_DEVICES": "cuda:0",
            "ASR_VAD_MODEL": "fsmn-vad",
            "ASR_OFFLINE_MODEL": "paraformer",
            "ASR_PUNC_MODEL": "ct-punc",
            "ASR_SENTENCE_PREROLL_MS": "150",
        }
    )
    vad, offline = settings.companions[Role.VAD], settings.companions[Role.OFFLINE]
    assert (vad.kind, vad.devices) == ("vad", ("cpu",))
    assert offline.punc_model == "ct-punc"
    assert settings.endpoint.preroll_ms == 150
    assert GatewaySettings.from_env({}).companions.get(Role.VAD) is None
    with pytest.raises(ValueError, match=r"ASR_PUNC_MODEL.*ASR_OFFLINE_MODEL"):
        GatewaySettings.from_env({"ASR_PUNC_MODEL": "ct-punc"})
