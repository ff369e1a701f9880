"""OpenAI's realtime dialect in process (``tests.helpers.session_harness``): the app's own
``serve_realtime`` over the FunASR session it translates to, on pools that answer in the
test's event loop. The live lane runs OpenAI's SDK against uvicorn and real workers; these
show the same events, transcripts exact to the byte, refusals and close codes in
milliseconds."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest

from gateway.openai_api.realtime.dialect import serve_realtime
from gateway.settings import GatewaySettings
from tests.helpers.realtime_audio import COMPLETED, DELTA, noise, pool_audio, wav_file, wav_payload
from tests.helpers.session_harness import Connection, checksum_text, harness_serving, served

pytestmark = pytest.mark.anyio

PATH = "/v1/realtime"
QUERY = "intent=transcription"
NO_TURN_DETECTION = {
    "type": "session.update",
    "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}},
}


async def _events_until(client: Connection, last: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] != last:
        events.append(await client.receive_json())
    return events


async def _append(client: Connection, payload: bytes, piece: int = 4801) -> None:
    for at in range(0, len(payload), piece):
        audio = base64.b64encode(payload[at : at + piece]).decode()
        await client.send_json({"type": "input_audio_buffer.append", "audio": audio})


async def _opened(client: Connection) -> None:
    assert (await client.receive_json())["type"] == "session.created"
    await client.send_json(NO_TURN_DETECTION)
    updated = await client.receive_json()
    assert updated["type"] == "session.updated"
    assert updated["session"]["audio"]["input"]["turn_detection"] is None


async def test_a_committed_turn_gets_its_events_and_the_exact_transcript() -> None:
    wav = wav_file(noise(np.random.default_rng(24), 1.5, 24000), 24000)
    serving = harness_serving()
    async with served(serve_realtime, serving, path=PATH, query=QUERY) as client:
        await _opened(client)
        await _append(client, wav_payload(wav))  # odd pieces: samples split across appends
        await client.send_json({"type": "input_audio_buffer.commit"})
        events = await _events_until(client, "conversation.item.done")
    assert [e["type"] for e in events if e["type"] != DELTA] == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        COMPLETED,
        "conversation.item.done",
    ]
    completed = events[-2]
    assert completed["transcript"] == checksum_text(pool_audio(wav))
    assert completed["usage"]["seconds"] == pytest.approx(1.5, abs=0.001)
    deltas = [e for e in events if e["type"] == DELTA]
    assert deltas[-1]["delta"] == completed["transcript"]
    assert {e["item_id"] for e in deltas} == {completed["item_id"]}
    assert serving.admission.active == 0


@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty", None),
        ({"type": "no.such.event"}, "invalid_event", "type"),
        ({"type": "response.create"}, "unsupported_event", "type"),
        ({"type": "input_audio_buffer.append", "audio": "@@@"}, "invalid_value", "audio"),
        ({"type": "session.update", "session": {"type": "realtime"}}, "invalid_value", None),
    ],
)
async def test_a_bad_event_gets_an_error_event_and_the_session_goes_on(
    event: dict[str, Any], code: str, param: str | None
) -> None:
    wav = wav_file(noise(np.random.default_rng(1), 0.5, 24000), 24000)
    async with served(serve_realtime, harness_serving(), path=PATH, query=QUERY) as client:
        await _opened(client)
        await client.send_json({**event, "event_id": "client_1"})
        error = await client.receive_json()
        await _append(client, wav_payload(wav))
        await client.send_json({"type": "input_audio_buffer.commit"})
        events = await _events_until(client, COMPLETED)
    assert error["type"] == "error"
    assert (error["error"]["code"], error["error"]["event_id"]) == (code, "client_1")
    if param is not None:
        assert error["error"]["param"] == param
    assert events[-1]["transcript"] == checksum_text(pool_audio(wav))


async def test_a_clear_drops_the_buffer_and_only_the_kept_audio_is_transcribed() -> None:
    rng = np.random.default_rng(2)
    dropped = wav_file(noise(rng, 0.8, 24000), 24000)
    kept = wav_file(noise(rng, 0.7, 24000), 24000)
    async with served(serve_realtime, harness_serving(), path=PATH, query=QUERY) as client:
        await _opened(client)
        await _append(client, wav_payload(dropped))
        await client.send_json({"type": "input_audio_buffer.clear"})
        await _append(client, wav_payload(kept))
        await client.send_json({"type": "input_audio_buffer.commit"})
        events = await _events_until(client, COMPLETED)
    assert "input_audio_buffer.cleared" in [e["type"] for e in events]
    assert [e["type"] for e in events].count(COMPLETED) == 1
    assert events[-1]["transcript"] == checksum_text(pool_audio(kept))


async def test_a_full_server_answers_server_busy_then_1013() -> None:
    serving = harness_serving(GatewaySettings(max_sessions=1, idle_timeout_s=10.0))
    async with served(serve_realtime, serving, path=PATH, query=QUERY) as first:
        assert (await first.receive_json())["type"] == "session.created"
        async with served(serve_realtime, serving, path=PATH, query=QUERY) as second:
            received = await second.until_closed()
    assert received[-1]["error"]["code"] == "server_busy"
    assert second.closed_with == 1013


async def test_another_intent_is_refused_with_its_code() -> None:
    async with served(serve_realtime, harness_serving(), path=PATH, query="intent=x") as client:
        received = await client.until_closed()
    assert received[-1]["error"]["code"] == "unsupported_intent"
    assert client.closed_with == 1008
