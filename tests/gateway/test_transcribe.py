"""POST /v1/transcribe with the checksum engine: uploads, URLs, and every refusal."""

from __future__ import annotations

import http.server
import io
import threading
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import soundfile
from starlette.testclient import TestClient

from gateway.access import AccessSettings
from gateway.app import create_app
from gateway.settings import GatewaySettings
from gateway.transcribe import Slots, TranscribeError, TranscribeSettings
from shared.settings import PoolSettings
from tests.gateway.checksums import checksum

SETTINGS = GatewaySettings(
    pool=PoolSettings(model="checksum", devices=("cpu",)),
    max_session_s=60.0,
    transcribe=TranscribeSettings(max_bytes=4 << 20, fetch_allow_private=True),
)


def wav_bytes(samples: np.ndarray, rate: int = 16000, fmt: str = "WAV") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype="PCM_16")
    return buffer.getvalue()


def speech(seconds: float, rate: int = 16000, channels: int = 1) -> np.ndarray:
    rng = np.random.default_rng(0)
    shape = (int(seconds * rate), channels) if channels > 1 else (int(seconds * rate),)
    return rng.integers(-8000, 8000, size=shape, dtype=np.int16)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(SETTINGS)) as client:
        yield client


def upload(client: TestClient, data: bytes, name: str = "a.wav") -> tuple[int, dict[str, object]]:
    response = client.post("/v1/transcribe", files={"file": (name, data, "audio/wav")})
    return response.status_code, response.json()


def test_a_16khz_mono_wav_is_decoded_whole(client: TestClient) -> None:
    samples = speech(2.5)
    status, body = upload(client, wav_bytes(samples))
    assert status == 200, body
    # The checksum engine's text: every sample of the file, in order, as the gateway sent it.
    assert body["text"] == checksum(samples.astype("<i2").tobytes())
    assert body["duration_s"] == 2.5
    assert body["source"] == "a.wav"
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


def test_requests_that_are_neither_multipart_nor_json_get_415(client: TestClient) -> None:
    response = client.post("/v1/transcribe", content=b"RIFF", headers={"content-type": "audio/wav"})
    assert response.status_code == 415
    assert "multipart" in response.json()["error"]["message"]
    response = client.post("/v1/transcribe", files={"other": ("x", b"1")})
    assert response.status_code == 400
    assert "'file'" in response.json()["error"]["message"]


def test_an_upload_over_the_byte_limit_gets_413() -> None:
    small = replace(SETTINGS, transcribe=TranscribeSettings(max_bytes=10_000))
    with TestClient(create_app(small)) as client:
        status, body = upload(client, wav_bytes(speech(1.0)))
    assert status == 413, body


class _WavHandler(http.server.BaseHTTPRequestHandler):
    payload = wav_bytes(speech(1.5))

    def do_GET(self) -> None:
        if self.path == "/a.wav":
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.payload)))
            self.end_headers()
            self.wfile.write(self.payload)
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/a.wav")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def file_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WavHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_url_is_fetched_and_redirects_followed(client: TestClient, file_server: str) -> None:
    for path in ("/a.wav", "/moved"):
        response = client.post("/v1/transcribe", json={"url": file_server + path})
        assert response.status_code == 200, response.json()
        expected = checksum(speech(1.5).astype("<i2").tobytes())
        assert response.json()["text"] == expected


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"url": "file:///etc/passwd"}, "only http and https"),
        ({"url": "ftp://example.com/a.wav"}, "only http and https"),
        ({"link": "http://example.com"}, '{"url"'),
        ("not an object", '{"url"'),
    ],
)
def test_bad_urls_are_refused(client: TestClient, body: object, fragment: str) -> None:
    response = client.post("/v1/transcribe", json=body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]


def test_a_missing_file_at_the_url_is_a_400(client: TestClient, file_server: str) -> None:
    response = client.post("/v1/transcribe", json={"url": file_server + "/nothing.wav"})
    assert response.status_code == 400
    assert "HTTP 404" in response.json()["error"]["message"]


def test_internal_addresses_are_not_fetched_unless_allowed(file_server: str) -> None:
    strict = replace(SETTINGS, transcribe=TranscribeSettings())
    with TestClient(create_app(strict)) as client:
        response = client.post("/v1/transcribe", json={"url": file_server + "/a.wav"})
    assert response.status_code == 400
    assert "internal address" in response.json()["error"]["message"]


def test_keys_apply_to_transcription_too() -> None:
    guarded = replace(SETTINGS, access=AccessSettings(api_keys=frozenset({"k"})))
    with TestClient(create_app(guarded)) as client:
        assert upload(client, wav_bytes(speech(0.5)))[0] == 401
        response = client.post(
            "/v1/transcribe",
            files={"file": ("a.wav", wav_bytes(speech(0.5)), "audio/wav")},
            headers={"Authorization": "Bearer k"},
        )
        assert response.status_code == 200


def test_requests_beyond_the_concurrency_are_refused_at_once() -> None:
    slots = Slots(1)
    slots.take()
    with pytest.raises(TranscribeError) as refused:
        slots.take()
    assert refused.value.status == 429
    slots.give()
    slots.take()
