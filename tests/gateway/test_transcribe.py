"""POST /v1/transcribe with the checksum engine: uploads, URLs, and every refusal."""

from __future__ import annotations

import http.server
import io
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Protocol

import numpy as np
import pytest
import soundfile
import soxr
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.files import request as transcribe
from gateway.limits.transcriptions import TranscriptionLimiter
from gateway.settings import AccessSettings, GatewaySettings, TranscribeSettings
from shared.settings import PoolSettings
from tests.gateway.checksums import checksum
from tests.gateway.uvicorn_server import free_port

SETTINGS = GatewaySettings(
    pool=PoolSettings(model="checksum", devices=("cpu",)),
    max_session_s=60.0,
    transcribe=TranscribeSettings(max_bytes=4 << 20, fetch_allow_private=True),
)


def wav_bytes(
    samples: np.ndarray, rate: int = 16000, fmt: str = "WAV", subtype: str = "PCM_16"
) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=fmt, subtype=subtype)
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


def counted(client: TestClient, name: str, label: str, value: str) -> float:
    """A counter's sample in /metrics: ``counted(c, "asr_transcriptions", "status", "400")``."""
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == f"{name}_total" and sample.labels.get(label) == value:
                return float(sample.value)
    return 0.0


def refused(client: TestClient, reason: str) -> float:
    return counted(client, "asr_transcription_refusals", "reason", reason)


class _Response(Protocol):
    status_code: int

    def json(self) -> Any: ...


def message_of(response: _Response) -> str:
    error = response.json()["error"]
    assert error["status"] == response.status_code
    return str(error["message"])


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
        elif self.path == "/bad-length":
            self.send_response(200)
            self.send_header("Content-Length", "12x")
            self.end_headers()
            self.wfile.write(self.payload)
        elif self.path == "/chunked":
            self.protocol_version = "HTTP/1.1"
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(self.payload), 4096):
                piece = self.payload[start : start + 4096]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
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
    limiter = TranscriptionLimiter(1)
    assert limiter.try_take()
    assert not limiter.try_take()
    limiter.give()
    assert limiter.try_take()


# -- the header checked before the work ---------------------------------------------------


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records any sample read or resampling; a refusal from the header leaves it empty."""
    calls: list[str] = []
    read_mono, resample = transcribe._read_mono, soxr.resample

    def spy_read(data: bytes, frames: int) -> np.ndarray:
        calls.append("read")
        return read_mono(data, frames)

    def spy_resample(*args: object, **kwargs: object) -> np.ndarray:
        calls.append("resample")
        return resample(*args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(transcribe, "_read_mono", spy_read)
    monkeypatch.setattr(soxr, "resample", spy_resample)
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


# -- fetch failures: each a 400 with its reason, counted ----------------------------------


@pytest.fixture(scope="module")
def silent_server() -> Iterator[str]:
    """Accepts connections (the kernel does, into the backlog) and never answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as sock:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/a.wav"


def test_a_refused_connection_is_a_400(client: TestClient) -> None:
    before = counted(client, "asr_transcriptions", "status", "400"), refused(client, "fetch_failed")
    url = f"http://127.0.0.1:{free_port()}/a.wav"  # nothing listens there
    response = client.post("/v1/transcribe", json={"url": url})
    assert response.status_code == 400
    assert "ConnectError" in message_of(response)
    after = counted(client, "asr_transcriptions", "status", "400"), refused(client, "fetch_failed")
    assert after == (before[0] + 1, before[1] + 1)


def test_a_fetch_past_its_timeout_is_a_400(silent_server: str) -> None:
    quick = replace(
        SETTINGS,
        transcribe=TranscribeSettings(fetch_timeout_s=0.3, fetch_allow_private=True),
    )
    with TestClient(create_app(quick)) as client:
        response = client.post("/v1/transcribe", json={"url": silent_server})
        assert response.status_code == 400
        assert "took over 0.3 s (ASR_FETCH_TIMEOUT)" in message_of(response)
        assert counted(client, "asr_transcriptions", "status", "400") == 1
        assert refused(client, "fetch_timeout") == 1


def test_a_malformed_content_length_from_the_url_is_a_400(
    client: TestClient, file_server: str
) -> None:
    before = refused(client, "fetch_failed")
    response = client.post("/v1/transcribe", json={"url": file_server + "/bad-length"})
    assert response.status_code == 400
    assert "fetching the URL failed" in message_of(response)
    assert refused(client, "fetch_failed") == before + 1


def test_a_fetch_over_the_byte_limit_is_a_413(file_server: str) -> None:
    small = replace(
        SETTINGS, transcribe=TranscribeSettings(max_bytes=10_000, fetch_allow_private=True)
    )
    with TestClient(create_app(small)) as client:
        for path in ("/a.wav", "/chunked"):  # declared, then counted as it arrives
            response = client.post("/v1/transcribe", json={"url": file_server + path})
            assert response.status_code == 413, path
        assert refused(client, "too_large") == 2


def test_an_unexpected_failure_is_a_counted_json_500_with_one_log_line(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(data: bytes, max_seconds: float) -> np.ndarray:
        raise KeyError("a bug")

    monkeypatch.setattr("gateway.files.endpoint.decode_wav", broken)
    before = refused(client, "internal")
    with caplog.at_level(logging.ERROR, logger="gateway.files.endpoint"):
        status, body = upload(client, wav_bytes(speech(0.5)))
    assert status == 500, body
    assert body == {"error": {"status": 500, "message": "the server failed; see its log"}}
    assert refused(client, "internal") == before + 1
    assert counted(client, "asr_transcriptions", "status", "500") >= 1
    [record] = [r for r in caplog.records if r.name == "gateway.files.endpoint"]
    assert "KeyError" in record.getMessage()
    assert "\n" not in record.getMessage()
