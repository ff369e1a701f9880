"""ITN end to end, where FunASR's C++ server applies it: `offline` and `2pass-offline`
results, never partials; on by default (the C++ server's default), off with `itn: false`;
`/v1/transcribe` and OpenAI's endpoint take an `itn` field.

How the test knows what ITN must produce: the offline model is a tiny random-weight
Paraformer whose vocabulary is spoken Chinese numbers alone, so it decodes (random)
numbers. Without ITN its text must be funasr's own `generate` for the audio; with ITN it
must be WeTextProcessing's Chinese ITN (``wetext``, the FSTs the C++ server runs) of that
same text, and the two must differ.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
import soundfile
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from tests.helpers.checksums import END, checksum, config
from tests.helpers.loops import GatewayClient
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.models.synthetic.base import NUMERALS
from workers.models.synthetic.paraformer import build_model_dir


@pytest.fixture(scope="module")
def numerals_model(model_cache: Path) -> Path:
    target = model_cache / "synthetic-offline-tiny-seed3-numerals"
    if (target / "model.pt").is_file():
        return target
    return build_model_dir(target, "offline", "tiny", seed=3, vocabulary=NUMERALS)


@pytest.fixture(scope="module")
def client(numerals_model: Path) -> Iterator[TestClient]:
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(streaming, model=str(numerals_model), kind=Role.OFFLINE)
    settings = GatewaySettings(
        pool=streaming, companions={Role.OFFLINE: offline}, idle_timeout_s=30.0
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


def speech(seed: int, seconds: float) -> np.ndarray[Any, np.dtype[np.int16]]:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 3000 * np.sin(2 * np.pi * (200 + 60 * seed) * t)
    return (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)


@pytest.fixture(scope="module")
def expected(numerals_model: Path) -> tuple[np.ndarray[Any, Any], str, str]:
    """The audio, funasr's own text for it, and WeTextProcessing's ITN of that text."""
    from wetext import Normalizer

    audio = speech(40, 2.0)
    raw = load_automodel(str(numerals_model), "cpu", 1).generate(
        input=to_float(audio), disable_pbar=True
    )[0]["text"]
    written = Normalizer(lang="zh", operator="itn").normalize(raw)
    assert written != raw, "the text had nothing to normalize: the test would prove nothing"
    return audio, raw, written


def final_of(client: TestClient, frames: list[str | bytes]) -> list[dict[str, Any]]:
    with client.websocket_connect("/") as ws:
        for frame in frames:
            if isinstance(frame, bytes):
                ws.send_bytes(frame)
            else:
                ws.send_text(frame)
        messages: list[dict[str, Any]] = []
        while not messages or not messages[-1]["is_final"]:
            messages.append(ws.receive_json())
    return messages


def test_offline_results_are_written_by_itn_unless_the_config_says_no(
    client: TestClient, expected: tuple[np.ndarray[Any, Any], str, str]
) -> None:
    audio, raw, written = expected
    pcm = audio.astype("<i2").tobytes()
    (default,) = final_of(client, [config(mode="offline"), pcm, END])  # no itn: true
    assert default["text"] == written
    (off,) = final_of(client, [config(mode="offline", itn=False), pcm, END])
    assert off["text"] == raw
    (on,) = final_of(client, [config(mode="offline", itn=True), pcm, END])
    assert on["text"] == written


def test_2pass_partials_never_get_itn_the_offline_pass_does(
    client: TestClient, expected: tuple[np.ndarray[Any, Any], str, str]
) -> None:
    audio, _, written = expected
    pcm = audio.astype("<i2").tobytes()
    messages = final_of(client, [config(mode="2pass"), pcm, END])
    partials = [m for m in messages if m["mode"] == "2pass-online"]
    assert partials
    # The streaming pass's texts are the checksum engine's, untouched.
    assert partials[-1]["text"] == checksum(pcm[: len(partials) * 19200])
    assert messages[-1]["mode"] == "2pass-offline"
    assert messages[-1]["text"] == written


def wav(audio: np.ndarray[Any, Any]) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def test_files_take_an_itn_field(
    client: TestClient, expected: tuple[np.ndarray[Any, Any], str, str]
) -> None:
    audio, raw, written = expected
    files = {"file": ("a.wav", wav(audio), "audio/wav")}
    assert client.post("/v1/transcribe", files=files).json()["text"] == written
    off = client.post("/v1/transcribe", files=files, data={"itn": "false"})
    assert off.json()["text"] == raw
    bad = client.post("/v1/transcribe", files=files, data={"itn": "maybe"})
    assert bad.status_code == 400
    openai_files = {"file": ("a.wav", wav(audio), "audio/wav")}
    answer = client.post(
        "/v1/audio/transcriptions", files=openai_files, data={"model": "whisper-1"}
    )
    assert answer.json()["text"] == written
    # OpenAI's SDK sends it as an extra form field: extra_body={"itn": "false"}.
    answer = client.post(
        "/v1/audio/transcriptions", files=openai_files, data={"model": "whisper-1", "itn": "false"}
    )
    assert answer.json()["text"] == raw


def test_the_openai_sdk_sends_itn_as_an_extra_field(
    client: TestClient, expected: tuple[np.ndarray[Any, Any], str, str]
) -> None:
    audio, raw, _ = expected
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client)
    text = sdk.audio.transcriptions.create(
        model="whisper-1", file=("a.wav", wav(audio)), extra_body={"itn": "false"}
    ).text
    assert text == raw
