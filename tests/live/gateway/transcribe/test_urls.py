"""POST /v1/transcribe of a URL: fetched and redirected, refused, and each fetch failure a
counted 400 with its reason."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from starlette.testclient import TestClient

from bench.common.net import free_port
from gateway.app import create_app
from gateway.settings import TranscribeSettings
from tests.helpers.checksums import checksum
from tests.helpers.loops import GatewayClient
from tests.helpers.transcription import SETTINGS, counted, message_of, refused, upload
from tests.helpers.wav import speech, wav_bytes


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
    with GatewayClient(create_app(strict)) as client:
        response = client.post("/v1/transcribe", json={"url": file_server + "/a.wav"})
    assert response.status_code == 400
    assert "internal address" in response.json()["error"]["message"]


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
    with GatewayClient(create_app(quick)) as client:
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


def test_a_server_gone_mid_body_is_a_counted_400(client: TestClient, file_server: str) -> None:
    before = refused(client, "fetch_failed")
    response = client.post("/v1/transcribe", json={"url": file_server + "/truncated"})
    assert response.status_code == 400
    assert "fetching the URL failed" in message_of(response)
    assert refused(client, "fetch_failed") == before + 1


def test_a_body_that_arrives_in_pieces_is_fetched_whole(
    client: TestClient, file_server: str
) -> None:
    response = client.post("/v1/transcribe", json={"url": file_server + "/slow-chunked"})
    assert response.status_code == 200, response.json()
    assert response.json()["text"] == checksum(speech(1.5).astype("<i2").tobytes())


def test_a_fetch_over_the_byte_limit_is_a_413(file_server: str) -> None:
    small = replace(
        SETTINGS, transcribe=TranscribeSettings(max_bytes=10_000, fetch_allow_private=True)
    )
    with GatewayClient(create_app(small)) as client:
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
