"""SenseVoiceSmall behind the FunASR protocol: `offline` mode and the 2pass second pass,
with `svs_lang` and `svs_itn` as FunASR's C++ server takes them, and its tags as fields.

The random-weight model's text is random pieces, so every text is checked against funasr's
own ``generate`` on the same model and the same audio."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import openai
import pytest
import soundfile
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.audio.endpointer import EndpointSettings, EnergyEndpointer
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from tests.helpers.checksums import END, config, receive_until_is_final
from tests.helpers.loops import GatewayClient
from tests.helpers.session_frames import expect_error
from tests.helpers.vad import spoken
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.sensevoice.engine import split_tags

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(tiny_sensevoice_model: Path) -> Iterator[TestClient]:
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(streaming, model=str(tiny_sensevoice_model), kind=Role.OFFLINE)
    settings = GatewaySettings(
        pool=streaming, companions={Role.OFFLINE: offline}, idle_timeout_s=30.0
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


@pytest.fixture(scope="module")
def model(tiny_sensevoice_model: Path) -> object:
    return load_automodel(str(tiny_sensevoice_model), "cpu", 1)


def expected(model: object, audio: np.ndarray, language: str, itn: bool) -> dict[str, str]:
    """What our result should say: funasr's text without its tags, and the tags."""
    result = model.generate(  # type: ignore[attr-defined]
        input=to_float(audio), language=language, use_itn=itn, disable_pbar=True
    )
    text, tags = split_tags(str(result[0]["text"]))
    assert text  # something to compare
    return {"text": text, "language": tags.language, "emotion": tags.emotion, "event": tags.event}


def fields(message: dict[str, object]) -> dict[str, object]:
    return {name: message.get(name) for name in ("text", "language", "emotion", "event")}


def offline_result(
    client: TestClient, audio: np.ndarray, **config_fields: object
) -> dict[str, object]:
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline", **config_fields))
        ws.send_bytes(audio.astype("<i2").tobytes())
        ws.send_text(END)
        messages = receive_until_is_final(ws)
    (message,) = messages
    return message


@pytest.mark.parametrize(("language", "itn"), [("ja", False), ("en", True), ("auto", False)])
def test_offline_mode_honours_svs_lang_and_svs_itn(
    client: TestClient, model: object, language: str, itn: bool
) -> None:
    audio = spoken(31, ("speech", 2.0))
    message = offline_result(client, audio, svs_lang=language, svs_itn=itn)
    want = expected(model, audio, language, itn)
    assert fields(message) == want
    assert want["language"] == ("zh" if language == "auto" else language)
    assert "<|" not in str(message["text"])


def test_offline_mode_without_svs_fields_takes_the_cpp_servers_defaults(
    client: TestClient, model: object
) -> None:
    """No svs_lang, no svs_itn: "auto" and true, as FunASR's C++ server defaults them."""
    audio = spoken(32, ("speech", 1.5))
    message = offline_result(client, audio)
    assert fields(message) == expected(model, audio, "auto", True)


def test_sensevoice_is_the_2pass_second_pass(client: TestClient, model: object) -> None:
    """Each sentence's 2pass-offline result is SenseVoice's decode of that sentence's audio,
    in the language svs_lang says, tagged."""
    audio = spoken(33, ("speech", 1.2), ("quiet", 2.0), ("speech", 1.0))
    pcm = audio.astype("<i2").tobytes()
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="2pass", svs_lang="ko", svs_itn=False))
        for start in range(0, len(pcm), 3200):
            ws.send_bytes(pcm[start : start + 3200])
        ws.send_text(END)
        messages = receive_until_is_final(ws)
    offline = [m for m in messages if m["mode"] == "2pass-offline"]
    assert len(offline) == 2
    # Where the session cuts the sentences: the endpointer's say (as in test_timestamps).
    endpointer = EnergyEndpointer(EndpointSettings())
    (end,) = endpointer.push(pcm)
    assert endpointer.speech_start is not None
    second_start = end.offset + endpointer.speech_start - 300 * 32  # less the pre-roll
    first = expected(model, audio[: end.offset // 2], "ko", False)
    second = expected(model, audio[second_start // 2 :], "ko", False)
    assert fields(offline[0]) == first
    assert fields(offline[1]) == second
    assert first["language"] == "ko"
    # Partials are the streaming model's, never tagged.
    assert all("language" not in m for m in messages if m["mode"] == "2pass-online")


def test_a_bad_svs_lang_is_refused_by_name(client: TestClient) -> None:
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline", svs_lang="klingon"))
        error = expect_error(ws, 1008)
    assert "svs_lang" in error["message"]


def wav(audio: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


@pytest.mark.parametrize(("language", "itn"), [("yue", "false"), (None, None)])
def test_transcribe_takes_a_language_and_answers_with_the_tags(
    client: TestClient, model: object, language: str | None, itn: str | None
) -> None:
    """``language`` and ``itn`` reach SenseVoice (unset: auto and true); the answer carries
    what it heard as fields, never in the text."""
    audio = spoken(34, ("speech", 2.0))
    data = {name: value for name, value in (("language", language), ("itn", itn)) if value}
    response = client.post(
        "/v1/transcribe", files={"file": ("a.wav", wav(audio), "audio/wav")}, data=data
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["engine"] == "sensevoice"
    assert fields(body) == expected(model, audio, language or "auto", itn != "false")
    assert body["language"] == (language or "zh")


def test_transcribe_refuses_a_language_sensevoice_does_not_take(client: TestClient) -> None:
    files = {"file": ("a.wav", wav(spoken(35, ("speech", 0.5))), "audio/wav")}
    response = client.post("/v1/transcribe", files=files, data={"language": "fr"})
    assert response.status_code == 400
    assert "language" in response.json()["error"]["message"]


def test_openais_verbose_json_says_the_language_heard(client: TestClient, model: object) -> None:
    """OpenAI's SDK: the language hint goes in (one SenseVoice does not take is "auto"),
    the language the model heard comes out; the text is SenseVoice's with ITN on."""
    audio = spoken(36, ("speech", 2.0))
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client)
    for hint, heard in (("ja", "ja"), (None, "zh"), ("fr", "zh")):
        answer = sdk.audio.transcriptions.create(
            model="whisper-1",
            file=("a.wav", wav(audio)),
            response_format="verbose_json",
            language=hint if hint else openai.omit,
        )
        want = expected(model, audio, hint if hint in ("ja",) else "auto", True)
        assert answer.language == heard
        assert answer.text == want["text"]


def test_the_onnx_runtime_serves_sensevoice_with_funasrs_text(
    tiny_sensevoice_model: Path, model: object
) -> None:
    """ASR_OFFLINE_ENGINE=paraformer-onnx: the pool exports funasr's graph at its start and
    serves SenseVoice on sensevoice-onnx; the text and tags are funasr's."""
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(
        streaming, model=str(tiny_sensevoice_model), kind=Role.OFFLINE, runtime="onnx"
    )
    settings = GatewaySettings(
        pool=streaming, companions={Role.OFFLINE: offline}, idle_timeout_s=30.0
    )
    audio = spoken(37, ("speech", 1.8))
    with GatewayClient(create_app(settings)) as onnx_client:
        message = offline_result(onnx_client, audio, svs_lang="en", svs_itn=True)
        engine = onnx_client.post(
            "/v1/transcribe", files={"file": ("a.wav", wav(audio), "audio/wav")}
        ).json()["engine"]
        (offline_worker,) = onnx_client.get("/readyz").json()["offline_workers"]
        metrics = onnx_client.get("/metrics").text
    assert engine == "sensevoice-onnx"
    # What the session really runs on, as onnxruntime said, not the device asked for.
    assert offline_worker["provider"] == "CPUExecutionProvider"
    assert offline_worker["gpu_memory_bytes"] is None
    assert 'provider="CPUExecutionProvider",worker="offline-0"} 1.0' in metrics
    assert fields(message) == expected(model, audio, "en", True)
