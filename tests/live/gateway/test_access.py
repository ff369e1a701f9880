"""API keys, origin allow-list and the per-client cap: the rules, then through the app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from gateway.app import create_app
from gateway.limits.access import ClientSessions, check_handshake
from gateway.settings import AccessSettings, GatewaySettings
from shared.errors import ProtocolError
from shared.settings import PoolSettings
from tests.helpers.checksums import END, check_online, config
from tests.helpers.loops import GatewayClient

KEYS = AccessSettings(api_keys=frozenset({"k-one", "k-two"}))


def test_no_settings_admit_everyone() -> None:
    assert check_handshake(AccessSettings(), {}, b"") is None


def test_api_key_in_the_authorization_header_or_the_token_parameter() -> None:
    assert check_handshake(KEYS, {"authorization": "Bearer k-two"}, b"") is None
    assert check_handshake(KEYS, {"authorization": "bearer  k-one "}, b"") is None
    assert check_handshake(KEYS, {}, b"mode=x&token=k-one") is None


@pytest.mark.parametrize(
    ("headers", "query", "message"),
    [
        ({}, b"", "an API key is required"),
        ({"authorization": "Basic k-one"}, b"", "an API key is required"),
        ({"authorization": "Bearer "}, b"", "an API key is required"),
        ({"authorization": "Bearer k-three"}, b"", "not valid"),
        ({}, b"token=k-on", "not valid"),
        ({}, b"token=", "an API key is required"),
    ],
)
def test_missing_or_wrong_keys_are_refused_with_401(
    headers: dict[str, str], query: bytes, message: str
) -> None:
    refusal = check_handshake(KEYS, headers, query)
    assert refusal is not None
    assert refusal.status == 401
    assert message in refusal.message


def test_origin_allow_list_applies_to_browsers_only() -> None:
    settings = AccessSettings.from_env({"ASR_ALLOWED_ORIGINS": "https://app.example.com/, x"})
    assert check_handshake(settings, {"origin": "https://APP.example.com"}, b"") is None
    assert check_handshake(settings, {}, b"") is None  # not a browser: no Origin header
    refusal = check_handshake(settings, {"origin": "https://evil.example"}, b"")
    assert refusal is not None
    assert refusal.status == 403
    assert "https://evil.example" in refusal.message


def test_settings_from_env() -> None:
    settings = AccessSettings.from_env(
        {"ASR_API_KEYS": " a, b ,,", "ASR_MAX_SESSIONS_PER_CLIENT": "3"}
    )
    assert settings.api_keys == {"a", "b"}
    assert settings.max_sessions_per_client == 3
    with pytest.raises(ValueError, match="ASR_MAX_SESSIONS_PER_CLIENT"):
        AccessSettings.from_env({"ASR_MAX_SESSIONS_PER_CLIENT": "many"})
    with pytest.raises(ValueError, match="ASR_MAX_SESSIONS_PER_CLIENT"):
        AccessSettings.from_env({"ASR_MAX_SESSIONS_PER_CLIENT": "-1"})


def test_client_cap_counts_live_sessions_per_address_and_forgets_idle_ones() -> None:
    sessions = ClientSessions(cap=2)
    with sessions.admit("10.0.0.1"), sessions.admit("10.0.0.1"):
        with pytest.raises(ProtocolError, match="at most 2"):
            sessions.admit("10.0.0.1")
        with sessions.admit("10.0.0.2"):
            assert sessions.live("10.0.0.1") == 2
    assert sessions.live("10.0.0.1") == 0
    assert not sessions._live  # no entry left behind for addresses gone quiet
    with ClientSessions(cap=0).admit("x"):  # 0: no cap
        pass


# -- through the app --------------------------------------------------------------------

SETTINGS = GatewaySettings(
    pool=PoolSettings(model="checksum", devices=("cpu",)),
    access=AccessSettings(
        api_keys=frozenset({"secret"}),
        allowed_origins=frozenset({"https://ok.example"}),
        max_sessions_per_client=2,
    ),
    idle_timeout_s=10.0,
)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with GatewayClient(create_app(SETTINGS)) as client:
        yield client


def one_utterance(client: TestClient, url: str, **kwargs: object) -> None:
    pcm = bytes(range(256)) * 40
    with client.websocket_connect(url, **kwargs) as ws:  # type: ignore[arg-type]
        ws.send_text(config(chunk_size=[0, 1, 0]))
        ws.send_bytes(pcm)
        ws.send_text(END)
        results: list[dict[str, object]] = []
        while not results or not results[-1]["is_final"]:
            results.append(ws.receive_json())
        check_online(results, pcm, 1920)


def test_a_valid_key_in_header_or_query_is_served(client: TestClient) -> None:
    one_utterance(client, "/", headers={"Authorization": "Bearer secret"})
    one_utterance(client, "/?token=secret")


@pytest.mark.parametrize(
    ("url", "headers", "status", "message"),
    [
        ("/", {}, 401, "an API key is required"),
        ("/?token=nope", {}, 401, "not valid"),
        ("/?token=secret", {"Origin": "https://evil.example"}, 403, "not allowed"),
    ],
)
def test_refused_handshakes_get_an_http_error_with_a_reason(
    client: TestClient, url: str, headers: dict[str, str], status: int, message: str
) -> None:
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        client.websocket_connect(url, headers=headers),
    ):
        pass
    assert denied.value.status_code == status
    body = denied.value.json()
    assert body["code"] == status
    assert message in body["message"]
    metrics = client.get("/metrics").text
    reason = "unauthorized" if status == 401 else "forbidden_origin"
    assert f'asr_sessions_refused_total{{reason="{reason}"}}' in metrics


def test_a_third_session_from_one_address_is_closed_with_1008(client: TestClient) -> None:
    url = "/?token=secret"
    with (
        client.websocket_connect(url),
        client.websocket_connect(url),
        client.websocket_connect(url) as third,
    ):
        error = third.receive_json()
        assert error["type"] == "error"
        assert error["code"] == 1008
        assert "ASR_MAX_SESSIONS_PER_CLIENT" in error["message"]
    # The places are given back: a new session from the address is served.
    one_utterance(client, url)
