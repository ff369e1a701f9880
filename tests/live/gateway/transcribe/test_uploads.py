"""POST /v1/transcribe with the checksum engine: uploads, the header checked before the
work, bodies capped as they arrive, and every refusal."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.audio import wav
from gateway.settings import AccessSettings, TranscribeSettings
from tests.helpers.checksums import checksum
from tests.helpers.loops import GatewayClient
from tests.helpers.transcription import SETTINGS, message_of, refused, upload
from tests.helpers.wav import speech, wav_bytes


def test_a_16khz_mono_wav_is_decoded_whole(client: TestClient) -> None:
    samples = speech(2.5)
    status, body = upload(client, wav_bytes(samples))
    assert status == 200, body
    # The checksum engine's text: every sample of the file, in order, as the gateway sent it.
    assert body["text"] == checksum(samples.astype("<i2").tobytes())
    assert body["duration_s"] == 2.5
    assert body["source"] == "a.wav"
    # No token times from the checksum engine: no timestamps, no sentences (absent, as the
    # C++ server leaves stamp_sents out, not empty).
    assert "timestamps" not in body
    assert "sentences" not in body
    assert 'asr_transcriptions_total{status="200"}' in client.get("/metrics").text


def test_other_rates_and_channels_are_mixed_and_resampled(client: TestClient) -> None:
    status, body = upload(client, wav_bytes(speech(2.0, rate=44100, channels=2), rate=44100))
    assert status == 200, body
    assert body["duration_s"] == pytest.approx(2.0, abs=0.01)
    samples = int(str(body["text"]).split(":")[0])
    assert samples == pytest.approx(32000, abs=2)


@pytest.mark.parametrize(
    ("data", "status", "fragment"),
    [
        pytest.param(b"", 400, "empty", id="empty"),
        pytest.param(wav_bytes(speech(1.0))[:30], 400, "truncated", id="truncated-wav"),
        pytest.param(b"ID3\x04" + bytes(2000), 415, "not a WAV", id="mp3-like"),
        pytest.param(wav_bytes(speech(1.0), fmt="FLAC"), 415, "FLAC", id="flac"),
        pytest.param(wav_bytes(speech(61.0)), 413, "ASR_MAX_SESSION_SECONDS", id="too-long"),
    ],
)
def test_bad_uploads_are_refused_with_a_reason(
    client: TestClient, data: bytes, status: int, fragment: str
) -> None:
    got, body = upload(client, data)
    assert got == status, body
    error = body["error"]
    assert isinstance(error, dict)
    assert error["status"] == status
    assert fragment in error["message"]


@pytest.mark.parametrize(
    "hotwords", ["阿里巴巴 达摩院", '{"阿里巴巴": 20}', ""], ids=["words", "object", "empty"]
)
def test_hotwords_in_either_form_are_taken_with_an_upload(
    client: TestClient, hotwords: str
) -> None:
    # The checksum engine ignores them, as a model without hotwords does: the text stands.
    samples = speech(1.0)
    data = wav_bytes(samples)
    files = {"file": ("a.wav", data, "audio/wav")}
    response = client.post("/v1/transcribe", files=files, data={"hotwords": hotwords})
    assert response.status_code == 200, response.json()
    assert response.json()["text"] == checksum(samples.astype("<i2").tobytes())


def test_hotwords_past_the_limits_are_refused_with_400(client: TestClient) -> None:
    files = {"file": ("a.wav", wav_bytes(speech(0.5)), "audio/wav")}
    response = client.post("/v1/transcribe", files=files, data={"hotwords": "x" * 33})
    assert response.status_code == 400
    assert "hotword" in response.json()["error"]["message"]
    body = {"url": "http://127.0.0.1:9/a.wav", "hotwords": ["a"]}
    response = client.post("/v1/transcribe", json=body)
    assert response.status_code == 400
    assert "hotwords must be a string" in response.json()["error"]["message"]


def test_speakers_of_a_model_without_a_speaker_model_are_refused_with_400(
    client: TestClient,
) -> None:
    files = {"file": ("a.wav", wav_bytes(speech(0.5)), "audio/wav")}
    for field in ("speakers", "spk"):
        response = client.post("/v1/transcribe", files=files, data={field: "true"})
        assert response.status_code == 400
        assert "no ASR_SPEAKER_MODEL" in response.json()["error"]["message"]
    response = client.post("/v1/transcribe", json={"url": "http://127.0.0.1:9/a", "spk": 1})
    assert response.status_code == 400
    assert "not true or false" in response.json()["error"]["message"]
    # false is the default, asked or not: the file is transcribed.
    response = client.post("/v1/transcribe", files=files, data={"speakers": "FALSE"})
    assert response.status_code == 200


def test_requests_that_are_neither_multipart_nor_json_get_415(client: TestClient) -> None:
    response = client.post("/v1/transcribe", content=b"RIFF", headers={"content-type": "audio/wav"})
    assert response.status_code == 415
    assert "multipart" in response.json()["error"]["message"]
    response = client.post("/v1/transcribe", files={"other": ("x", b"1")})
    assert response.status_code == 400
    assert "'file'" in response.json()["error"]["message"]


def test_an_upload_over_the_byte_limit_gets_413() -> None:
    small = replace(SETTINGS, transcribe=TranscribeSettings(max_bytes=10_000))
    with GatewayClient(create_app(small)) as client:
        status, body = upload(client, wav_bytes(speech(1.0)))
    assert status == 413, body


def test_keys_apply_to_transcription_too() -> None:
    guarded = replace(SETTINGS, access=AccessSettings(api_keys=frozenset({"k"})))
    with GatewayClient(create_app(guarded)) as client:
        assert upload(client, wav_bytes(speech(0.5)))[0] == 401
        response = client.post(
            "/v1/transcribe",
            files={"file": ("a.wav", wav_bytes(speech(0.5)), "audio/wav")},
            headers={"Authorization": "Bearer k"},
        )
        assert response.status_code == 200


# -- the header checked before the work ---------------------------------------------------


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records any sample read or resampled; a refusal from the header leaves it empty."""
    calls: list[str] = []
    decode = wav._decode_to_16k

    def spy(data: bytes, frames: int, rate: int) -> np.ndarray:
        calls.append("decode")
        return decode(data, frames, rate)

    monkeypatch.setattr(wav, "_decode_to_16k", spy)
    return calls


@pytest.mark.parametrize(
    ("rate", "frames"),
    [
        pytest.param(1, 3599, id="1Hz-7KB"),  # 3,599 s: 57.6 M samples once resampled
        pytest.param(2, 3599, id="2Hz"),
        pytest.param(7999, 8000, id="7999Hz"),
        pytest.param(96000, 48000, id="96kHz"),
    ],
)
def test_rates_outside_8_to_48_khz_are_refused_from_the_header(
    client: TestClient, no_decoding: list[str], rate: int, frames: int
) -> None:
    before = refused(client, "bad_rate")
    status, body = upload(client, wav_bytes(speech(frames / rate, rate=rate)[:frames], rate=rate))
    assert status == 400, body
    error = body["error"]
    assert isinstance(error, dict)
    assert f"sample rate of {rate} Hz; 8000 to 48000 Hz" in error["message"]
    assert no_decoding == []
    assert refused(client, "bad_rate") == before + 1


@pytest.mark.parametrize("rate", [8000, 48000])
def test_the_edge_rates_are_taken(client: TestClient, rate: int) -> None:
    status, body = upload(client, wav_bytes(speech(1.0, rate=rate), rate=rate))
    assert status == 200, body
    assert body["duration_s"] == pytest.approx(1.0, abs=0.01)


def test_more_than_8_channels_are_refused_from_the_header(
    client: TestClient, no_decoding: list[str]
) -> None:
    status, body = upload(client, wav_bytes(speech(0.1, channels=9)))
    assert status == 400, body
    assert "9 channels; at most 8" in str(body["error"])
    assert no_decoding == []
    status, body = upload(client, wav_bytes(speech(0.1, channels=8)))
    assert status == 200, body


def test_too_long_audio_is_refused_before_reading_samples(
    client: TestClient, no_decoding: list[str]
) -> None:
    before = refused(client, "too_long")
    status, body = upload(client, wav_bytes(speech(61.0, rate=8000), rate=8000))
    assert status == 413, body
    assert no_decoding == []
    assert refused(client, "too_long") == before + 1


def test_compressed_wav_encodings_are_refused_with_415(client: TestClient) -> None:
    status, body = upload(client, wav_bytes(speech(0.5), subtype="IMA_ADPCM"))
    assert status == 415, body
    assert "IMA_ADPCM" in str(body["error"])


def test_other_encodings_are_decoded(client: TestClient) -> None:
    for subtype in ("PCM_U8", "PCM_24", "FLOAT", "ULAW"):
        status, body = upload(client, wav_bytes(speech(0.5), subtype=subtype))
        assert status == 200, (subtype, body)
        assert body["duration_s"] == 0.5


# -- bodies capped as they arrive (the memory and disk figures: test_transcribe_live.py) ---


def test_a_declared_length_over_the_limit_gets_413(client: TestClient) -> None:
    before = refused(client, "too_large")
    headers = {"content-type": "multipart/form-data; boundary=b", "content-length": str(8 << 20)}
    response = client.post("/v1/transcribe", content=b"--b--", headers=headers)
    assert response.status_code == 413
    assert "ASR_TRANSCRIBE_MAX_BYTES" in message_of(response)
    headers = {"content-type": "application/json", "content-length": "65537"}
    response = client.post("/v1/transcribe", content=b"{}", headers=headers)
    assert response.status_code == 413
    assert "JSON body" in message_of(response)
    assert refused(client, "too_large") == before + 2


@pytest.mark.parametrize("declared", ["12x", "-1", "1e3", ""])
def test_a_malformed_content_length_gets_400(client: TestClient, declared: str) -> None:
    headers = {"content-type": "application/json", "content-length": declared}
    response = client.post("/v1/transcribe", content=b"{}", headers=headers)
    assert response.status_code == 400
    assert "Content-Length" in message_of(response)


def test_a_chunked_json_body_over_64_kib_gets_413(client: TestClient) -> None:
    def body() -> Iterator[bytes]:
        yield b'{"url": "http://example.com/a.wav", "pad": "'
        for _ in range(64):
            yield b"x" * 4096

    response = client.post(
        "/v1/transcribe", content=body(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert "JSON body is larger than 65536 bytes" in message_of(response)


def test_a_form_with_too_many_parts_gets_400(client: TestClient) -> None:
    fields = {f"f{i}": "x" for i in range(8)}
    files = {"file": ("a.wav", wav_bytes(speech(0.5)), "audio/wav")}
    response = client.post("/v1/transcribe", files=files, data=fields)
    assert response.status_code == 400
    assert "more than 8 parts" in message_of(response)
