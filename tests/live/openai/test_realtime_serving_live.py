"""The realtime endpoint as the FunASR endpoint is served: its offline pass, its drain, its
limits; OpenAI's SDK against a real uvicorn."""

from __future__ import annotations

import base64
import contextlib
import io
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import numpy as np
import openai
import pytest
import soundfile
from websockets.exceptions import ConnectionClosed

from bench.common.gateway import Gateway, serve, serve_blocking
from tests.helpers.realtime_audio import COMPLETED, events_until, noise, pool_audio, wav_file

pytestmark = pytest.mark.slow


def connect(server: Gateway) -> Any:
    client = openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused", max_retries=0)
    return client.realtime.connect(extra_query={"intent": "transcription"})


def manual_turns(conn: Any) -> None:
    assert conn.recv().type == "session.created"
    conn.session.update(
        session={"type": "transcription", "audio": {"input": {"turn_detection": None}}}
    )
    assert conn.recv().type == "session.updated"


def append(conn: Any, pcm: bytes, piece: int = 4800) -> None:
    for at in range(0, len(pcm), piece):
        conn.input_audio_buffer.append(audio=base64.b64encode(pcm[at : at + piece]).decode())


def closed_code(conn: Any) -> tuple[list[Any], int | None]:
    """The events up to the server's close, and its code."""
    events: list[Any] = []
    try:
        while True:
            events.append(conn.recv())
    except ConnectionClosed as closed:
        return events, None if closed.rcvd is None else closed.rcvd.code


@pytest.fixture(scope="module")
def offline_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A tiny random-weight offline Paraformer behind the checksum streaming engine."""
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_OFFLINE_MODEL": "synthetic:tiny"}
    log = tmp_path_factory.mktemp("realtime-offline") / "server.log"
    with serve_blocking(env, log, ready_timeout=180) as server:
        yield server


def test_with_an_offline_model_completed_is_its_decode_of_the_turn(offline_model: Gateway) -> None:
    """The turn's completed transcript is the offline model's text for exactly the turn's
    audio: what POST /v1/transcribe answers for a 16 kHz WAV of it."""
    rng = np.random.default_rng(5)
    wav = wav_file(noise(rng, 2.0, 24000), 24000)
    expected = pool_audio(wav)
    with connect(offline_model) as conn:
        manual_turns(conn)
        samples, _ = soundfile.read(io.BytesIO(wav), dtype="int16")
        append(conn, samples.astype("<i2").tobytes())
        conn.input_audio_buffer.commit()
        events = events_until(conn, COMPLETED)
    pcm16 = np.frombuffer(expected, dtype="<i2")
    answer = httpx.post(
        f"{offline_model.http}/v1/transcribe",
        files={"file": ("turn.wav", wav_file(pcm16, 16000), "audio/wav")},
        timeout=30,
    )
    assert answer.status_code == 200
    text = answer.json()["text"]
    assert text  # random weights still say something
    assert events[-1].transcript == text


@pytest.mark.anyio
async def test_a_drain_lets_the_open_turn_finish_then_closes_with_1012(
    tmp_path: Any,
) -> None:
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_DRAIN_TIMEOUT": "20"}
    async with serve(env, tmp_path / "server.log") as server:

        def session() -> tuple[list[Any], int | None, list[Any], int | None]:
            rng = np.random.default_rng(9)
            pcm = noise(rng, 0.6, 24000).astype("<i2").tobytes()
            with connect(server) as conn:
                manual_turns(conn)
                append(conn, pcm)
                # A round trip: its answer follows the audio into the session.
                conn.session.update(session={"type": "transcription"})
                assert [e.type for e in events_until(conn, "session.updated")][-1:] == [
                    "session.updated"
                ]
                server.terminate()
                # Admission stops: a new session is told so.
                for _ in range(100):
                    with connect(server) as late:
                        refused, late_code = closed_code(late)
                    if late_code == 1012:
                        break
                conn.input_audio_buffer.commit()
                events, code = closed_code(conn)
            return events, code, refused, late_code

        events, code, refused, late_code = await anyio.to_thread.run_sync(session)
        assert await server.exited() == 0
    assert late_code == 1012
    assert refused[-1].type == "error"
    assert refused[-1].error.code == "server_shutting_down"
    assert [e.type for e in events if e.type in (COMPLETED, "error")] == [COMPLETED, "error"]
    assert events[-1].error.code == "server_shutting_down"
    assert code == 1012


@pytest.fixture(scope="module")
def small_limits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_MAX_FRAME_BYTES": "65536",
        "ASR_MAX_FRAMES_PER_SECOND": "20",
    }
    log = tmp_path_factory.mktemp("realtime-limits") / "server.log"
    with serve_blocking(env, log, ready_timeout=60) as server:
        yield server


def test_an_event_over_the_frame_limit_closes_with_1009(small_limits: Gateway) -> None:
    """Base64 of three frames' worth of audio, and more: refused before it is parsed."""
    with connect(small_limits) as conn:
        manual_turns(conn)
        conn.send({"type": "input_audio_buffer.append", "audio": "A" * 300_000})
        events, code = closed_code(conn)
    assert events[-1].error.code == "event_too_large"
    assert code == 1009


@pytest.mark.parametrize(
    "event",
    [
        {"type": "input_audio_buffer.clear"},
        # One byte: half a sample, so no frame reaches the session; the dialect counts it.
        {"type": "input_audio_buffer.append", "audio": "AA=="},
    ],
    ids=["clear", "tiny-append"],
)
def test_events_faster_than_the_frame_rate_close_with_1008(
    small_limits: Gateway, event: dict[str, str]
) -> None:
    with connect(small_limits) as conn:
        manual_turns(conn)
        sent = 0
        with contextlib.suppress(ConnectionClosed):  # closed under the loop
            while sent < 60:
                conn.send(event)
                sent += 1
        events, code = closed_code(conn)
    assert code == 1008
    # A second's burst (20, the session.update among them), and the one refused.
    assert sent >= 20
    assert events[-1].error.code == "session_limit"
    assert "ASR_MAX_FRAMES_PER_SECOND" in events[-1].error.message


def test_refused_events_end_the_session_at_their_cap(small_limits: Gateway) -> None:
    """OpenAI keeps a session open after an error; a client sending only bad events is
    closed after MAX_INVALID_EVENTS of them (each costs it a frame, us a parse and a
    reply)."""
    with connect(small_limits) as conn:
        manual_turns(conn)
        with contextlib.suppress(ConnectionClosed):
            for _ in range(100):
                conn.send({"type": "no.such.event"})
        events, code = closed_code(conn)
    errors = [e for e in events if e.type == "error"]
    assert [e.error.code for e in errors[:-1]] == ["invalid_event"] * 100
    assert "100 events were refused" in errors[-1].error.message
    assert code == 1008


def test_metrics_count_realtime_sessions_and_their_error_codes(small_limits: Gateway) -> None:
    with connect(small_limits) as conn:
        manual_turns(conn)
        conn.send({"type": "no.such.event"})
        assert conn.recv().type == "error"
    metrics = httpx.get(f"{small_limits.http}/metrics").text
    lines = {line.split(" ")[0]: line.split(" ")[1] for line in metrics.splitlines() if line}
    assert float(lines["asr_realtime_sessions_total"]) >= 1
    assert float(lines['asr_realtime_errors_total{code="invalid_event"}']) >= 1
    assert float(lines["asr_sessions_total"]) >= 1  # a session as FunASR's are
