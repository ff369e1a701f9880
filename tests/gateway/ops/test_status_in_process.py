"""``/healthz`` and ``/readyz`` in process: the app's own handlers on a real ``Serving``
whose pools answer in the test (``tests.helpers.session_harness``), so each answer a
balancer or process manager acts on is shown without starting a worker."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from starlette.requests import Request
from starlette.responses import Response

from gateway.ops.status import healthz, readyz
from gateway.session.serving import Serving
from gateway.settings import AccessSettings, GatewaySettings
from tests.helpers.session_harness import EchoPool, echo_model, harness_serving

pytestmark = pytest.mark.anyio

KEY = "status-key"


def _request(query: str = "", headers: dict[str, str] | None = None) -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/readyz",
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    return Request(scope)


def _body(response: Response) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(bytes(response.body))
    return body


def _pool(serving: Serving, name: str) -> EchoPool:
    return cast(EchoPool, serving.models[name].pool)


def _two_models(settings: GatewaySettings | None = None) -> Serving:
    models = {"a": echo_model("a", max_sessions=1), "b": echo_model("b")}
    return harness_serving(settings, models=models)


async def test_healthz_is_ok_until_a_pool_cannot_serve_and_names_it() -> None:
    serving = _two_models()
    assert (await healthz(serving)).status_code == 200
    _pool(serving, "b").health = "every worker failed to start"
    failing = await healthz(serving)
    assert failing.status_code == 503
    assert _body(failing) == {
        "status": "failing",
        "model": "b",
        "pool": "streaming",
        "reason": "every worker failed to start",
    }


async def test_healthz_says_why_it_is_not_serving() -> None:
    response = await healthz(None, "shutting down")
    assert (response.status_code, _body(response)["reason"]) == (503, "shutting down")


async def test_readyz_follows_each_model_and_the_gateway() -> None:
    serving = _two_models()
    ready = await readyz(serving, _request())
    assert ready.status_code == 200
    assert set(_body(ready)["models"]) == {"a", "b"}
    _pool(serving, "b").ready = False
    assert (await readyz(serving, _request())).status_code == 503
    assert (await readyz(serving, _request("model=a"))).status_code == 200
    assert (await readyz(serving, _request("model=b"))).status_code == 503


async def test_a_model_at_its_own_cap_is_full_for_itself_alone() -> None:
    serving = _two_models()
    serving.models["a"].places.take()  # its one place
    full = await readyz(serving, _request("model=a"))
    assert (full.status_code, _body(full)["full"]) == (503, True)
    assert (await readyz(serving, _request("model=b"))).status_code == 200
    assert (await readyz(serving, _request())).status_code == 200


async def test_draining_is_not_ready() -> None:
    serving = _two_models()
    serving.admission.start_drain()
    draining = await readyz(serving, _request())
    assert (draining.status_code, _body(draining)["draining"]) == (503, True)


async def test_an_unknown_model_is_404_with_the_key_and_a_plain_503_without() -> None:
    access = AccessSettings(api_keys=frozenset({KEY}), protect_status=True)
    serving = _two_models(GatewaySettings(access=access, idle_timeout_s=10.0))
    keyed = await readyz(serving, _request("model=nope", {"Authorization": f"Bearer {KEY}"}))
    assert keyed.status_code == 404
    bare = await readyz(serving, _request("model=nope"))
    served = await readyz(serving, _request("model=a"))
    assert bare.status_code == 503
    # Without the key: the shape of a served model's answer, so names cannot be probed.
    assert set(_body(bare)) == set(_body(served)) == {"ready", "draining", "full"}
    assert "workers" in _body(
        await readyz(serving, _request("", {"Authorization": f"Bearer {KEY}"}))
    )
