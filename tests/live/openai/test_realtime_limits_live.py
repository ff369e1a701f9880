"""What the realtime dialect takes from a client, on the wire: OpenAI's SDK against a real
uvicorn with the default limits (ASR_MAX_TEXT_BYTES 64 KiB, ASR_MAX_FRAME_BYTES 1 MiB) on
the checksum engine. Events too large for what they are end the session with 1009; an
append of the most audio there is is taken whole, byte for byte; what a session keeps of
an update is OpenAI's shape only."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest
from websockets.exceptions import ConnectionClosed

from bench.common.gateway import Gateway, serve_blocking
from tests.helpers.checksums import checksum
from tests.helpers.realtime_audio import (
    COMPLETED,
    DELTA,
    events_until,
    noise,
    pool_audio,
    wav_file,
    wav_payload,
)

pytestmark = pytest.mark.slow

MIB = 1 << 20


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu"}
    log = tmp_path_factory.mktemp("realtime-limits") / "server.log"
    with serve_blocking(env, log, ready_timeout=60) as server:
        yield server


def connect(server: Gateway) -> Any:
    client = openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused", max_retries=0)
    return client.realtime.connect(extra_query={"intent": "transcription"})


def updated(conn: Any, input_: dict[str, object]) -> dict[str, Any]:
    """A session.update's answer, as the server sent it (not as the SDK's types read it)."""
    conn.send(
        {"type": "session.update", "session": {"type": "transcription", "audio": {"input": input_}}}
    )
    answer: dict[str, Any] = json.loads(conn.recv_bytes())
    assert answer["type"] == "session.updated", answer
    return answer


def closed_code(conn: Any) -> tuple[list[Any], int | None]:
    events: list[Any] = []
    try:
        while True:
            events.append(conn.recv())
    except ConnectionClosed as closed:
        return events, None if closed.rcvd is None else closed.rcvd.code


def nested_lists(size: int) -> str:
    return "[" + ",".join(["[]"] * (size // 3)) + "]"


@pytest.mark.parametrize(
    "event",
    [
        # 4 MiB of empty lists in noise_reduction: kept, and echoed in every update, before.
        '{"type": "session.update", "session": {"type": "transcription", "audio": {"input":'
        f' {{"noise_reduction": {{"type": "near_field", "x": {nested_lists(4 * MIB)}}}}}}}}}}}',
        json.dumps({"type": "input_audio_buffer.clear", "pad": "x" * 70_000}),
    ],
    ids=["nested-lists-update", "large-clear"],
)
def test_an_event_over_max_text_bytes_that_is_not_an_append_closes_with_1009(
    defaults: Gateway, event: str
) -> None:
    with connect(defaults) as conn:
        assert conn.recv().type == "session.created"
        conn.send_raw(event)
        events, code = closed_code(conn)
    assert [e.type for e in events] == ["error"]
    assert events[0].error.code == "event_too_large"
    assert "ASR_MAX_TEXT_BYTES" in events[0].error.message
    assert code == 1009


def test_a_g711_append_of_more_seconds_than_a_frame_closes_with_1009(defaults: Gateway) -> None:
    """40 s of 8 kHz u-law is 320 kB, far under three frames of base64 (which let 393 s
    through); an append carries at most ASR_MAX_FRAME_BYTES' 32.768 s, in any format."""
    with connect(defaults) as conn:
        assert conn.recv().type == "session.created"
        updated(conn, {"format": {"type": "audio/pcmu"}, "turn_detection": None})
        conn.input_audio_buffer.append(audio=base64.b64encode(bytes(320_000)).decode())
        events, code = closed_code(conn)
    assert events[-1].error.code == "event_too_large"
    assert "32.768 s" in events[-1].error.message
    assert code == 1009


def test_an_append_of_the_most_audio_is_taken_whole(defaults: Gateway) -> None:
    """32 s of 24 kHz audio in one append, decoded and resampled a second at a time:
    exactly one resampling of the whole reaches the pool."""
    rng = np.random.default_rng(32)
    wav = wav_file(noise(rng, 32.0, 24000), 24000)
    expected = pool_audio(wav)
    with connect(defaults) as conn:
        assert conn.recv().type == "session.created"
        updated(conn, {"turn_detection": None})
        conn.input_audio_buffer.append(audio=base64.b64encode(wav_payload(wav)).decode())
        conn.input_audio_buffer.commit()
        events = events_until(conn, COMPLETED)
    assert [e.delta for e in events if e.type == DELTA][-1] == checksum(expected)
    assert events[-1].transcript == checksum(expected)


def test_an_update_keeps_openais_shape_only(defaults: Gateway) -> None:
    with connect(defaults) as conn:
        assert conn.recv().type == "session.created"
        answer = updated(conn, {"noise_reduction": {"type": "far_field", "x": [[]] * 1000}})
        assert answer["session"]["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
        conn.send(
            {
                "type": "session.update",
                "session": {"type": "transcription", "include": ["everything"]},
                "event_id": "client_1",
            }
        )
        error = conn.recv()
        assert (error.type, error.error.code) == ("error", "invalid_value")
        assert (error.error.param, error.error.event_id) == ("session.include", "client_1")
        assert updated(conn, {})["session"]["include"] == []  # the session goes on


def test_an_event_id_no_text_frame_can_carry_is_refused_and_the_session_goes_on(
    defaults: Gateway,
) -> None:
    """JSON's "\\ud800" is a lone surrogate: sent back in an error event, the frame could
    not be encoded."""
    with connect(defaults) as conn:
        assert conn.recv().type == "session.created"
        conn.send_raw('{"type": "no.such.event", "event_id": "\\ud800"}')
        error = conn.recv()
        assert (error.error.code, error.error.param, error.error.event_id) == (
            "invalid_value",
            "event_id",
            None,
        )
        assert updated(conn, {})["type"] == "session.updated"
