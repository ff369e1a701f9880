"""OpenAI's own SDK (``client.realtime.connect``) against a real uvicorn, in transcription
mode, on the checksum engine.

How the bytes are verified: the checksum engine's text is ``"<samples>:<crc32>"`` of every
16 kHz int16 sample its stream has received so far. Each test computes the audio the pool
must get on its own, from the WAV file's samples: soundfile's reading of the file (its own
G.711 decoder for u-law), then one soxr resampling of the whole to 16 kHz in float32,
rounded to int16 (what ``POST /v1/transcribe`` does with the same file). A turn's last
delta (its streaming pass's final result) must be the checksum of exactly its part of that
audio, whatever the appends' sizes: a byte lost, doubled, reordered, or resampled
otherwise fails it. With server VAD the turns must split the audio with nothing left out
or counted twice. With an offline model (a tiny random-weight Paraformer here) the
completed transcript is that model's decode of the turn: equal to what ``POST
/v1/transcribe`` answers for a 16 kHz WAV of the turn's expected audio.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import openai
import pytest

from bench.common.gateway import Gateway, serve_blocking
from tests.helpers.checksums import checksum
from tests.helpers.realtime_audio import (
    COMPLETED,
    DELTA,
    append_all,
    events_until,
    noise,
    pool_audio,
    silence,
    types,
    wav_file,
    wav_payload,
)

pytestmark = pytest.mark.slow

KEY = "realtime-test-key"
RECV_TIMEOUT_S = 20.0
BASE_ENV = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_API_KEYS": KEY}


@pytest.fixture(scope="module")
def checksums(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The checksum engine alone: each turn is one streaming pass."""
    env = {**BASE_ENV, "ASR_MAX_SESSIONS": "2"}
    log = tmp_path_factory.mktemp("realtime") / "server.log"
    with serve_blocking(env, log, ready_timeout=60) as server:
        yield server


def connect(server: Gateway, key: str = KEY) -> Any:
    client = openai.OpenAI(base_url=f"{server.http}/v1", api_key=key, max_retries=0)
    return client.realtime.connect(extra_query={"intent": "transcription"})


def test_a_24khz_wav_streamed_and_committed_gives_deltas_and_the_exact_transcript(
    checksums: Gateway,
) -> None:
    rng = np.random.default_rng(24)
    wav = wav_file(noise(rng, 2.5, 24000), 24000)
    expected = pool_audio(wav)
    with connect(checksums) as conn:
        assert conn.recv().type == "session.created"
        conn.session.update(
            session={
                "type": "transcription",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}},
            }
        )
        updated = conn.recv()
        assert updated.type == "session.updated"
        assert updated.session.audio.input.turn_detection.type == "server_vad"  # the default
        conn.session.update(
            session={"type": "transcription", "audio": {"input": {"turn_detection": None}}}
        )
        assert conn.recv().session.audio.input.turn_detection is None
        append_all(conn, wav_payload(wav), 4801)  # odd: samples split across appends
        conn.input_audio_buffer.commit()
        events = events_until(conn, "conversation.item.done")
    # Deltas come as the streaming pass decodes, before the commit or after it.
    kinds = [kind for kind in types(events) if kind != DELTA]
    assert kinds == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        COMPLETED,
        "conversation.item.done",
    ]
    item = events[-1].item.id
    assert {event.item_id for event in events if event.type in (DELTA, COMPLETED)} == {item}
    # A delta per 600 ms chunk, each the checksum of the audio up to it; the last over all.
    chunk = 19200
    deltas = [event.delta for event in events if event.type == DELTA]
    ends = [*range(chunk, len(expected), chunk), len(expected)]
    assert deltas == [checksum(expected[:end]) for end in ends]
    completed = events[-2]
    # The checksum engine's text is a running value: the last one is the transcript, not
    # the deltas joined (a streaming model's, whose texts are new text, would be joined).
    assert completed.transcript == checksum(expected)
    assert completed.usage.seconds == pytest.approx(len(expected) / 32000, abs=0.001)
    assert events[-1].item.content[0].transcript == completed.transcript


def test_server_vad_commits_each_turn_where_the_pause_is(checksums: Gateway) -> None:
    """Two bursts with pauses: two items, each with speech_started, speech_stopped (after
    silence_duration_ms of pause), committed and its completed transcript; the transcript
    is the offline pass of exactly the turn's audio ending at ``audio_end_ms``."""
    rng = np.random.default_rng(7)
    rate = 24000
    samples = np.concatenate(
        [
            noise(rng, 1.2, rate),
            silence(1.0, rate),
            noise(rng, 1.0, rate),
            silence(1.0, rate),
        ]
    )
    wav = wav_file(samples, rate)
    expected = pool_audio(wav)
    with connect(checksums) as conn:
        conn.recv()  # session.created
        conn.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}
                },
            }
        )
        conn.recv()  # session.updated
        append_all(conn, wav_payload(wav), 2400)  # 50 ms appends
        events = events_until(conn, COMPLETED, count=2)
    speech = [e for e in events if e.type.startswith("input_audio_buffer.speech")]
    assert [e.type.rsplit(".", 1)[1] for e in speech] == [
        "speech_started",
        "speech_stopped",
        "speech_started",
        "speech_stopped",
    ]
    first, second = speech[1].item_id, speech[3].item_id
    assert first != second
    assert speech[0].audio_start_ms == 0
    # Speech ends at 1200 ms; the turn ends after 500 ms of pause, on a 30 ms frame.
    assert 1700 <= speech[1].audio_end_ms <= 1740
    # The second burst starts at 2200 ms; speech_started includes 300 ms of prefix padding.
    assert 1870 <= speech[2].audio_start_ms <= 1930
    assert 3700 <= speech[3].audio_end_ms <= 3740
    committed = [e for e in events if e.type == "input_audio_buffer.committed"]
    assert [e.item_id for e in committed] == [first, second]
    assert committed[1].previous_item_id == first
    # Each turn's streaming pass got exactly its audio: from the end of the one before to
    # its audio_end_ms (a whole number of 30 ms frames: exact in bytes).
    last_delta = {e.item_id: e.delta for e in events if e.type == DELTA}
    assert last_delta[first] == checksum(expected[: speech[1].audio_end_ms * 32])
    turn_two = expected[speech[1].audio_end_ms * 32 : speech[3].audio_end_ms * 32]
    assert last_delta[second] == checksum(turn_two)


def test_the_beta_client_with_g711_ulaw(checksums: Gateway) -> None:
    """The SDK's beta realtime client (``client.beta.realtime``, its own event types) and
    its ``transcription_session.update`` with ``g711_ulaw``: 8 kHz u-law, decoded as
    libsndfile decodes it, resampled to 16 kHz."""
    rng = np.random.default_rng(711)
    wav = wav_file(noise(rng, 1.5, 8000), 8000, subtype="ULAW")
    expected = pool_audio(wav)
    # The beta client always takes wss:// from base_url; websocket_base_url says ws://.
    client = openai.OpenAI(
        base_url=f"{checksums.http}/v1",
        websocket_base_url=f"ws://127.0.0.1:{checksums.port}/v1",
        api_key=KEY,
        max_retries=0,
    )
    beta = client.beta.realtime.connect(
        model="gpt-4o-transcribe", extra_query={"intent": "transcription"}
    )
    with beta as conn:
        conn.recv()
        # null turns detection off (OpenAI's reference); the beta types do not say so.
        session: Any = {
            "input_audio_format": "g711_ulaw",
            "input_audio_transcription": {"model": "gpt-4o-transcribe", "language": "zh"},
            "turn_detection": None,
        }
        conn.transcription_session.update(session=session)
        updated = conn.recv()
        assert updated.type == "transcription_session.updated"
        assert updated.session.input_audio_format == "g711_ulaw"
        append_all(conn, wav_payload(wav), 800)
        conn.input_audio_buffer.commit()
        events = events_until(conn, COMPLETED)
    created = [e for e in events if e.type == "conversation.item.created"]
    assert len(created) == 1
    assert created[0].item.content[0].type == "input_audio"
    assert [e.delta for e in events if e.type == DELTA][-1] == checksum(expected)
    assert events[-1].usage.seconds == pytest.approx(1.5, abs=0.01)


def test_bad_events_get_error_events_and_the_session_goes_on(checksums: Gateway) -> None:
    rng = np.random.default_rng(1)
    wav = wav_file(noise(rng, 0.5, 24000), 24000)
    with connect(checksums) as conn:
        conn.recv()
        conn.session.update(
            session={"type": "transcription", "audio": {"input": {"turn_detection": None}}}
        )
        conn.recv()
        bad: list[tuple[dict[str, Any], str, str | None]] = [
            ({"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty", None),
            ({"type": "no.such.event"}, "invalid_event", "type"),
            ({"type": "response.create"}, "unsupported_event", "type"),
            ({"type": "input_audio_buffer.append", "audio": "@@@"}, "invalid_value", "audio"),
            (
                {"type": "session.update", "session": {"type": "realtime"}},
                "invalid_value",
                "session.type",
            ),
            (
                {
                    "type": "session.update",
                    "session": {
                        "type": "transcription",
                        "audio": {"input": {"turn_detection": {"type": "magic_vad"}}},
                    },
                },
                "invalid_value",
                "session.audio.input.turn_detection.type",
            ),
        ]
        for event_id, (event, code, param) in enumerate(bad):
            conn.send({**event, "event_id": f"client_{event_id}"})
            error = conn.recv()
            assert error.type == "error"
            assert (error.error.code, error.error.param) == (code, param)
            assert error.error.event_id == f"client_{event_id}"
            assert error.error.type == "invalid_request_error"
        append_all(conn, wav_payload(wav), 4800)
        conn.input_audio_buffer.commit()
        events = events_until(conn, COMPLETED)
    assert [e.delta for e in events if e.type == DELTA][-1] == checksum(pool_audio(wav))


def test_clear_drops_the_buffer_and_its_results(checksums: Gateway) -> None:
    rng = np.random.default_rng(2)
    dropped = wav_file(noise(rng, 0.8, 24000), 24000)
    kept = wav_file(noise(rng, 0.7, 24000), 24000)
    with connect(checksums) as conn:
        conn.recv()
        conn.session.update(
            session={"type": "transcription", "audio": {"input": {"turn_detection": None}}}
        )
        conn.recv()
        append_all(conn, wav_payload(dropped), 4800)
        conn.input_audio_buffer.clear()
        append_all(conn, wav_payload(kept), 4800)
        conn.input_audio_buffer.commit()
        events = events_until(conn, COMPLETED)
    cleared_at = types(events).index("input_audio_buffer.cleared")
    completed = [e for e in events if e.type == COMPLETED]
    assert len(completed) == 1
    # The dropped buffer's deltas may come before the clear is read (the server sends each
    # chunk's result as it comes); after it, none: only the kept turn's.
    before = {e.item_id for e in events[:cleared_at] if e.type == DELTA}
    deltas = [e for e in events[cleared_at:] if e.type == DELTA]
    assert {e.item_id for e in deltas} == {completed[0].item_id}
    assert completed[0].item_id not in before
    assert deltas[-1].delta == checksum(pool_audio(kept))


def test_a_wrong_key_is_refused_in_the_handshake(checksums: Gateway) -> None:
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as refused, connect(checksums, key="wrong"):
        pass
    assert refused.value.response.status_code == 401


def test_a_full_server_answers_server_busy_then_1013(checksums: Gateway) -> None:
    """ASR_MAX_SESSIONS=2 here: the third realtime session is refused as a FunASR one is."""
    from websockets.exceptions import ConnectionClosed

    with connect(checksums) as first, connect(checksums) as second:
        assert first.recv().type == "session.created"
        assert second.recv().type == "session.created"
        with connect(checksums) as third:
            error = third.recv()
            assert error.type == "error"
            assert error.error.code == "server_busy"
            with pytest.raises(ConnectionClosed) as closed:
                third.recv()
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 1013


@pytest.mark.parametrize(("key", "accepted"), [(KEY, True), ("wrong", False)])
def test_a_browsers_key_subprotocol_is_read_and_realtime_chosen(
    checksums: Gateway, key: str, accepted: bool
) -> None:
    """What OpenAI's browser clients send: no headers, the key as a subprotocol."""
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect as ws_connect
    from websockets.typing import Subprotocol

    url = f"ws://127.0.0.1:{checksums.port}/v1/realtime?intent=transcription"
    offered = [Subprotocol("realtime"), Subprotocol(f"openai-insecure-api-key.{key}")]
    if not accepted:
        with pytest.raises(InvalidStatus) as refused, ws_connect(url, subprotocols=offered):
            pass
        assert refused.value.response.status_code == 401
        return
    with ws_connect(url, subprotocols=offered) as ws:
        assert ws.subprotocol == "realtime"
        assert json.loads(ws.recv(timeout=RECV_TIMEOUT_S))["type"] == "session.created"
