"""The gateway with an offline model: `offline` sessions and /v1/transcribe use it."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.audio.endpointer import EndpointSettings, EnergyEndpointer
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from tests.helpers.checksums import END, checksum, config
from tests.helpers.loops import GatewayClient
from workers.engines.paraformer.streaming import load_automodel, to_float

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(tiny_offline_model: Path) -> Iterator[TestClient]:
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(streaming, model=str(tiny_offline_model), kind=Role.OFFLINE)
    settings = GatewaySettings(
        pool=streaming, companions={Role.OFFLINE: offline}, idle_timeout_s=30.0
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


def speech(seed: int, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (3000 * np.sin(2 * np.pi * 330 * t) + 1500 * rng.standard_normal(t.size)).astype(
        np.int16
    )


def test_offline_sessions_use_the_offline_model_online_ones_do_not(
    client: TestClient, tiny_offline_model: Path
) -> None:
    audio = speech(1, 2.0)
    expected = load_automodel(str(tiny_offline_model), "cpu", 1).generate(
        input=to_float(audio), disable_pbar=True
    )[0]["text"]
    pcm = audio.astype("<i2").tobytes()
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline"))
        ws.send_bytes(pcm)
        ws.send_text(END)
        offline = ws.receive_json()
        ws.send_text(config(mode="online", chunk_size=[0, 10, 5]))
        ws.send_bytes(pcm)
        ws.send_text(END)
        online: list[dict[str, object]] = []
        while not online or not online[-1]["is_final"]:
            online.append(ws.receive_json())
    assert offline["mode"] == "offline"
    assert offline["is_final"] is True
    assert offline["text"] == expected
    assert online[-1]["text"] == checksum(pcm)  # the streaming pool: the checksum engine


def test_transcribe_uses_the_offline_model(client: TestClient, tiny_offline_model: Path) -> None:
    audio = speech(2, 1.5)
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, 16000, format="WAV", subtype="PCM_16")
    response = client.post(
        "/v1/transcribe", files={"file": ("a.wav", buffer.getvalue(), "audio/wav")}
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["engine"] == "paraformer-offline"
    expected = load_automodel(str(tiny_offline_model), "cpu", 1).generate(
        input=to_float(audio), disable_pbar=True
    )[0]["text"]
    assert body["text"] == expected


def test_metrics_label_the_offline_workers(client: TestClient) -> None:
    text = client.get("/metrics").text
    assert (
        'asr_worker_ready{device="cpu",model="synthetic-offline-tiny-seed0",worker="offline-0"} 1.0'
        in text
    )
    assert 'asr_worker_ready{device="cpu",model="checksum",worker="0"} 1.0' in text
    # The tests above decoded there.
    assert 'asr_chunks_total{model="synthetic-offline-tiny-seed0",worker="offline-0"}' in text


def test_readyz_lists_both_pools(client: TestClient) -> None:
    body = json.loads(client.get("/readyz").text)
    assert body["ready"] is True
    assert [w["engine"] for w in body["workers"]] == ["checksum"]
    assert [w["engine"] for w in body["offline_workers"]] == ["paraformer-offline"]
    # What each really runs on: funasr's PyTorch on the CPU; the checksum engine says nothing.
    assert [w["provider"] for w in body["offline_workers"]] == ["torch-cpu"]
    assert [w["provider"] for w in body["workers"]] == [None]


def test_settings_from_env_build_the_offline_pool() -> None:
    settings = GatewaySettings.from_env(
        {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu", "ASR_OFFLINE_MODEL": "synthetic:tiny"}
    )
    offline = settings.companions[Role.OFFLINE]
    assert (offline.kind, offline.devices, offline.batch_wait_s) == (
        "offline",
        ("cpu", "cpu"),
        0.05,
    )
    assert GatewaySettings.from_env({}).companions.get(Role.OFFLINE) is None


def test_2pass_sentences_are_decoded_by_the_offline_model(
    client: TestClient, tiny_offline_model: Path
) -> None:
    rng = np.random.default_rng(7)
    loud = rng.integers(-12000, 12000, 20000, dtype=np.int16)
    pcm = (np.concatenate([loud, np.zeros(16000, np.int16), loud[::-1]])).astype("<i2").tobytes()
    cuts = [end.offset for end in EnergyEndpointer(EndpointSettings()).push(pcm)]
    sentences = [pcm[: cuts[0]], pcm[cuts[0] :]]
    model = load_automodel(str(tiny_offline_model), "cpu", 1)
    expected = [
        model.generate(input=to_float(np.frombuffer(s, "<i2")), disable_pbar=True)[0]["text"]
        for s in sentences
    ]
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="2pass"))
        for start in range(0, len(pcm), 1920):
            ws.send_bytes(pcm[start : start + 1920])
        ws.send_text(END)
        messages: list[dict[str, object]] = []
        while not messages or not messages[-1]["is_final"]:
            messages.append(ws.receive_json())
    offline = [m["text"] for m in messages if m["mode"] == "2pass-offline"]
    assert len(cuts) == 1
    assert offline == expected
