"""Deepgram's live dialect in process (``tests.helpers.session_harness``): the app's own
``serve_listen`` over the FunASR session it translates to, on pools that answer in the
test's event loop with the checksum engine's text. The live lane runs Deepgram's SDK and the
agent frameworks against uvicorn and real workers; these show the messages, transcripts
exact to the byte, refusals and close codes in milliseconds."""

from __future__ import annotations

import hashlib
from typing import Any, cast

import anyio
import numpy as np
import pytest

from gateway.deepgram import dialect
from gateway.deepgram.dialect import serve_listen
from gateway.limits.model_places import ModelPlaces
from gateway.session.serving import ServedModel
from gateway.settings import GatewaySettings
from shared.messages import StreamOptions
from tests.helpers.realtime_audio import noise, pool_audio, silence, wav_file, wav_payload
from tests.helpers.session_harness import (
    Connection,
    EchoPool,
    EchoStream,
    checksum_text,
    harness_serving,
    served,
)
from workers.pool import Urgency, WorkerPool

pytestmark = pytest.mark.anyio

PATH = "/v1/listen"
RNG = np.random.default_rng(7)
SPEECH = noise(RNG, 1.0, 16000)
# Speech and the 300 ms pause that ends its utterance (endpointing's shortest): 30 ms
# frames, the one holding the speech's end counted as speech: the cut is at 1.32 s.
CUT = 21120


def _transcripts(messages: list[dict[str, Any]], final: bool) -> list[str]:
    return [
        m["channel"]["alternatives"][0]["transcript"]
        for m in messages
        if m["type"] == "Results" and m["is_final"] is final
    ]


async def _send(client: Connection, audio: bytes, piece: int = 3200) -> None:
    for at in range(0, len(audio), piece):
        await client.send_bytes(audio[at : at + piece])


async def _close_stream(client: Connection) -> list[dict[str, Any]]:
    await client.send_json({"type": "CloseStream"})
    return await client.until_closed()


async def test_a_pause_ends_an_utterance_and_close_stream_flushes_the_rest() -> None:
    audio = np.concatenate([SPEECH, silence(0.5, 16000), SPEECH]).astype("<i2").tobytes()
    query = (
        "encoding=linear16&sample_rate=16000&interim_results=true&vad_events=true&punctuate=true"
    )
    async with served(serve_listen, harness_serving(), path=PATH, query=query) as client:
        await _send(client, audio)
        messages = await _close_stream(client)
    assert client.closed_with == 1000
    finals = [m for m in messages if m["type"] == "Results" and m["is_final"]]
    assert [m["channel"]["alternatives"][0]["transcript"] for m in finals] == [
        checksum_text(audio[: 2 * CUT]),
        checksum_text(audio[2 * CUT :]),
    ]
    assert [(m["speech_final"], m["from_finalize"]) for m in finals] == [
        (True, False),
        (False, False),
    ]
    assert [(m["start"], m["duration"]) for m in finals] == [(0.0, 1.32), (1.32, 1.18)]
    assert _transcripts(messages, final=False)  # interim results came
    assert [m["timestamp"] for m in messages if m["type"] == "SpeechStarted"] == [0.0, 1.5]
    metadata = messages[-1]
    assert metadata["type"] == "Metadata"
    assert metadata["sha256"] == hashlib.sha256(audio).hexdigest()
    assert (metadata["duration"], metadata["channels"]) == (2.5, 1)


async def test_finalize_decodes_now_and_the_stream_goes_on() -> None:
    first, second = noise(RNG, 0.7, 16000).tobytes(), noise(RNG, 0.4, 16000).tobytes()
    async with served(serve_listen, harness_serving(), path=PATH, query="") as client:
        await _send(client, first)
        await client.send_json({"type": "Finalize"})
        finalized = await client.receive_json()
        await _send(client, second)
        messages = await _close_stream(client)
    assert (finalized["is_final"], finalized["from_finalize"]) == (True, True)
    assert finalized["channel"]["alternatives"][0]["transcript"] == checksum_text(first)
    assert _transcripts(messages, final=True) == [checksum_text(second)]
    assert _transcripts(messages, final=False) == []  # interim_results defaults to false


async def test_telephony_mulaw_at_8khz_is_resampled_as_every_8khz_path() -> None:
    samples = noise(RNG, 1.2, 8000)
    wav = wav_file(samples, 8000, subtype="ULAW")
    payload = wav_payload(wav)  # the u-law bytes a telephony client streams
    query = "encoding=mulaw&sample_rate=8000&endpointing=false"
    async with served(serve_listen, harness_serving(), path=PATH, query=query) as client:
        await _send(client, payload, piece=160)  # 20 ms, as telephony sends it
        messages = await _close_stream(client)
    assert _transcripts(messages, final=True) == [checksum_text(pool_audio(wav))]


async def test_a_wav_stream_with_no_encoding_is_read_by_its_header() -> None:
    wav = wav_file(noise(RNG, 0.9, 24000), 24000)
    async with served(
        serve_listen, harness_serving(), path=PATH, query="endpointing=false"
    ) as client:
        await _send(client, wav, piece=4801)  # odd pieces: samples split across messages
        messages = await _close_stream(client)
    assert _transcripts(messages, final=True) == [checksum_text(pool_audio(wav))]


async def test_another_container_is_refused_as_deepgram_refuses_undecodable_audio() -> None:
    async with served(serve_listen, harness_serving(), path=PATH, query="") as client:
        await client.send_bytes(b"OggS" + bytes(400))
        messages = await client.until_closed()
    assert client.closed_with == 1008
    assert messages[-1]["type"] == "Error"
    assert messages[-1]["description"].startswith("DATA-0000: Ogg audio is not decoded")


async def test_a_bad_message_is_a_schema_error_and_the_stream_goes_on() -> None:
    audio = SPEECH.tobytes()
    async with served(serve_listen, harness_serving(), path=PATH, query="") as client:
        await client.send_text("{not json")
        error = await client.receive_json()
        await _send(client, audio)
        messages = await _close_stream(client)
    assert error == {
        "type": "Error",
        "variant": "SchemaError",
        "description": "not a JSON message",
        "message": "{not json",
    }
    assert _transcripts(messages, final=True) == [checksum_text(audio)]


async def test_configure_replaces_the_keyterms_of_the_decodes_to_come() -> None:
    serving = harness_serving()
    async with served(serve_listen, serving, path=PATH, query="keyterm=alpha") as client:
        await _send(client, SPEECH.tobytes())
        await client.send_json({"type": "Configure", "keyterms": ["退款", "x" * 40, "beta"]})
        answer = await client.receive_json()
        await client.send_json({"type": "Finalize"})
        await _send(client, SPEECH.tobytes())  # the next utterance
        await _close_stream(client)
    assert answer == {
        "type": "ConfigureSuccess",
        "request_id": answer["request_id"],
        "keyterms": ["退款", "beta"],  # what fits the hotword rules; the rest left out
    }
    pool: Any = serving.default.pool
    assert [stream.options.hotwords for stream in pool.streams] == [("alpha",), ("退款", "beta")]


async def test_no_audio_and_no_message_for_the_timeout_closes_with_net_0001(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dialect, "IDLE_S", 0.3)
    async with served(serve_listen, harness_serving(), path=PATH, query="") as client:
        for _ in range(4):  # KeepAlive holds the stream open past the timeout
            await client.send_json({"type": "KeepAlive"})
            await anyio.sleep(0.15)
        messages = await client.until_closed()
    assert client.closed_with == 1011
    assert messages[-1]["description"] == "NET-0001: no audio or message within 10 s"


async def test_more_audio_in_one_message_than_a_frame_may_hold_closes_with_1009() -> None:
    settings = GatewaySettings(idle_timeout_s=10.0, max_frame_bytes=32000)
    async with served(serve_listen, harness_serving(settings), path=PATH, query="") as client:
        await client.send_bytes(bytes(32002))
        messages = await client.until_closed()
    assert client.closed_with == 1009
    assert "more audio than ASR_MAX_FRAME_BYTES" in messages[-1]["description"]


async def test_a_finalize_with_nothing_said_is_answered_from_finalize() -> None:
    async with served(serve_listen, harness_serving(), path=PATH, query="") as client:
        await client.send_json({"type": "Finalize"})
        answer = await client.receive_json()
        await _close_stream(client)
    assert (answer["is_final"], answer["from_finalize"]) == (True, True)
    assert answer["channel"]["alternatives"][0]["transcript"] == checksum_text(b"")


class _Unanswered(EchoStream):
    """A stream whose final result never comes: a decode still running."""

    async def finish(self, audio: Any = b"") -> None:
        self.finished = True


class _SlowPool(EchoPool):
    def open_stream(
        self, options: StreamOptions | None = None, urgency: Urgency = Urgency.BACKGROUND
    ) -> EchoStream:
        stream = _Unanswered(len(self.streams), options or StreamOptions())
        self.streams.append(stream)
        return stream


async def test_a_client_gone_after_close_stream_stops_the_wait_and_the_work() -> None:
    pool = _SlowPool()
    model = ServedModel("slow", cast(WorkerPool, pool), {}, ModelPlaces("slow", None))
    serving = harness_serving(models={"slow": model})
    async with served(serve_listen, serving, path=PATH, query="") as client:
        await _send(client, SPEECH.tobytes())
        await client.send_json({"type": "CloseStream"})
        await client.disconnect(1006)  # before the final result it asked for
    (stream,) = pool.streams
    assert stream.closed  # its stream given up: no decode goes on for nobody
    assert serving.admission.active == 0
