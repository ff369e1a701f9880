"""ASR_PROTECT_STATUS: /metrics and /readyz's details need a key; /healthz and /readyz's
status code never do, so that probes work without one; without the key, /readyz?model=
does not tell a name not served from a served one that cannot take a session."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.settings import AccessSettings, GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.loops import GatewayClient

KEYED = AccessSettings(api_keys=frozenset({"secret"}), protect_status=True)
SETTINGS = GatewaySettings(pool=PoolSettings(model="checksum", devices=("cpu",)), access=KEYED)
BEARER = {"Authorization": "Bearer secret"}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with GatewayClient(create_app(SETTINGS)) as client:
        yield client


def test_metrics_need_a_key(client: TestClient) -> None:
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert "API key" in refused.json()["error"]["message"]
    assert "asr_sessions" not in refused.text
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    served = client.get("/metrics", headers=BEARER)
    assert served.status_code == 200
    assert "asr_sessions_active" in served.text
    assert client.get("/metrics?token=secret").status_code == 200


def test_readyz_keeps_its_status_code_but_shows_details_only_with_a_key(
    client: TestClient,
) -> None:
    bare = client.get("/readyz")
    assert bare.status_code == 200
    assert bare.json() == {"ready": True, "draining": False, "full": False}
    detailed = client.get("/readyz", headers=BEARER).json()
    assert detailed["ready"] is True
    assert detailed["workers"][0]["pid"] > 0


def test_readyz_for_a_model_tells_no_one_without_a_key_which_names_are_served(
    client: TestClient,
) -> None:
    served = client.get("/readyz", headers=BEARER).json()["models"]
    (name,) = served
    assert client.get(f"/readyz?model={name}").status_code == 200
    unknown = client.get("/readyz?model=no-such-model")
    # As a served model that cannot take a session answers: the same shape, 503.
    assert unknown.status_code == 503
    assert unknown.json() == {"ready": False, "draining": False, "full": False}
    assert set(unknown.json()) == set(client.get(f"/readyz?model={name}").json())
    told = client.get("/readyz?model=no-such-model", headers=BEARER)
    assert told.status_code == 404
    assert "is not served" in told.json()["error"]


def test_healthz_is_open(client: TestClient) -> None:
    assert client.get("/healthz").status_code == 200


def test_unprotected_status_is_open_to_anyone() -> None:
    settings = replace(SETTINGS, access=replace(KEYED, protect_status=False))
    with GatewayClient(create_app(settings)) as client:
        assert client.get("/metrics").status_code == 200
        assert "workers" in client.get("/readyz").json()


@pytest.mark.parametrize(
    ("environ", "protected"),
    [
        ({"ASR_API_KEYS": "a"}, True),  # protected exactly when sessions are, by default
        ({"ASR_API_KEYS": "a", "ASR_PROTECT_STATUS": "0"}, False),
        ({"ASR_API_KEYS": "a", "ASR_PROTECT_STATUS": "1"}, True),
        ({}, False),
    ],
)
def test_protection_from_env(environ: dict[str, str], protected: bool) -> None:
    assert AccessSettings.from_env(environ).protect_status is protected


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"ASR_PROTECT_STATUS": "1"}, "set ASR_API_KEYS"),
        ({"ASR_API_KEYS": "a", "ASR_PROTECT_STATUS": "maybe"}, "must be 1 or 0"),
    ],
)
def test_bad_protection_settings_are_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AccessSettings.from_env(environ)
