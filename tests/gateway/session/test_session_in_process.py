"""The session core in process (``tests.helpers.session_harness``): FunASR's endpoint at
``/`` with its real entry, session, parser, limits and outbox, on pools that answer in the
test's event loop. What the live lane shows through uvicorn and real workers, shown here
in milliseconds: results exact to the byte, each refusal's frame and close code, places
given back."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gateway.session.entry import serve_websocket
from gateway.settings import GatewaySettings
from tests.helpers.session_harness import checksum_text, echo_model, harness_serving, served

pytestmark = pytest.mark.anyio

CHUNK = bytes(range(256)) * 15  # 3,840 bytes: two chunks of chunk_size [0, 1, 5]
CONFIG = {"mode": "online", "chunk_size": [0, 1, 5], "wav_name": "w", "is_speaking": True}


async def test_an_online_utterance_gets_a_result_per_chunk_and_its_exact_final() -> None:
    serving = harness_serving()
    async with served(serve_websocket, serving) as client:
        await client.send_json(CONFIG)
        await client.send_bytes(CHUNK)
        await client.send_json({"is_speaking": False})
        frames = []
        while not (frame := await client.receive_json()).get("is_final"):
            frames.append(frame)
    assert [f["text"] for f in frames] == [
        checksum_text(CHUNK[:1920]),
        checksum_text(CHUNK),
    ]
    assert frame["text"] == checksum_text(CHUNK)
    assert (frame["mode"], frame["wav_name"]) == ("online", "w")
    assert serving.admission.active == 0  # the place is back once the client has gone


@pytest.mark.parametrize(
    ("frames", "code", "fragment"),
    [
        (["hello"], 1008, "not valid JSON"),
        ([json.dumps({**CONFIG, "mode": "3pass"})], 1008, "mode"),
        ([b"\x00\x01"], 1008, "before the config"),
        ([json.dumps(CONFIG), b"\x00" * 70_000], 1009, "larger than"),
    ],
)
async def test_bad_input_gets_its_error_frame_then_its_close_code(
    frames: list[str | bytes], code: int, fragment: str
) -> None:
    settings = GatewaySettings(max_frame_bytes=65_536, idle_timeout_s=10.0)
    async with served(serve_websocket, harness_serving(settings)) as client:
        for frame in frames:
            if isinstance(frame, bytes):
                await client.send_bytes(frame)
            else:
                await client.send_text(frame)
        received = await client.until_closed()
    error = received[-1]
    assert (error["type"], error["code"], client.closed_with) == ("error", code, code)
    assert fragment in error["message"]


async def test_a_model_not_served_is_1008_before_any_place_is_taken() -> None:
    serving = harness_serving()
    async with served(serve_websocket, serving, query="model=nope") as client:
        error = (await client.until_closed())[-1]
    assert (error["code"], client.closed_with) == (1008, 1008)
    assert "'nope' is not served" in error["message"]
    assert serving.admission.active == 0


async def test_a_session_over_the_places_is_refused_at_once_with_1013() -> None:
    serving = harness_serving(GatewaySettings(max_sessions=1, idle_timeout_s=10.0))
    async with served(serve_websocket, serving) as first:
        await first.send_json(CONFIG)
        await first.send_bytes(CHUNK)
        await first.receive_json()  # in: it holds the one place
        async with served(serve_websocket, serving) as second:
            error = (await second.until_closed())[-1]
    assert (error["code"], second.closed_with) == (1013, 1013)


async def test_a_models_own_cap_refuses_that_model_alone() -> None:
    models = {"a": echo_model("a", max_sessions=1), "b": echo_model("b")}
    serving = harness_serving(models=models)
    async with served(serve_websocket, serving, query="model=a") as a:
        await a.send_json(CONFIG)
        await a.send_bytes(CHUNK)
        await a.receive_json()
        async with served(serve_websocket, serving, query="model=a") as again:
            assert (await again.until_closed())[-1]["code"] == 1013
        async with served(serve_websocket, serving, query="model=b") as b:
            await b.send_json(CONFIG)
            await b.send_bytes(CHUNK)
            assert (await b.receive_json())["text"] == checksum_text(CHUNK[:1920])


async def test_a_client_that_sends_no_config_is_closed_at_the_config_timeout() -> None:
    settings = GatewaySettings(idle_timeout_s=10.0, config_timeout_s=0.2)
    async with served(serve_websocket, harness_serving(settings)) as client:
        error = (await client.until_closed())[-1]
    assert (error["code"], client.closed_with) == (1008, 1008)
    assert "ASR_CONFIG_TIMEOUT" in error["message"]


async def test_a_drain_closes_a_session_between_utterances_with_1012() -> None:
    serving = harness_serving(replace(GatewaySettings(), idle_timeout_s=10.0))
    async with served(serve_websocket, serving) as client:
        await client.send_json(CONFIG)
        await client.send_bytes(CHUNK)
        await client.send_json({"is_speaking": False})
        while not (await client.receive_json()).get("is_final"):
            pass
        serving.admission.start_drain()
        error = (await client.until_closed())[-1]
    assert (error["code"], client.closed_with) == (1012, 1012)
