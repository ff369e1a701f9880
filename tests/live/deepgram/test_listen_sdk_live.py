"""Deepgram's official Python SDK (``deepgram-sdk``) against a real uvicorn at ``/v1/listen``,
on the checksum engine, and the handshake as raw clients see it.

How the bytes are verified: the checksum engine's text is ``"<samples>:<crc32>"`` of every
16 kHz sample its stream has received. An utterance's final transcript must be the checksum
of exactly its part of the audio the pool must get, computed here independently of the
gateway (soundfile's reading, one soxr resampling to 16 kHz: ``pool_audio``); the pause
that ends an utterance cuts the audio where the energy endpointer hears 300 ms of silence.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import websockets
from deepgram import AsyncDeepgramClient, DeepgramClient
from deepgram.core.api_error import ApiError
from deepgram.environment import DeepgramClientEnvironment
from deepgram.listen.v1.types import ListenV1Metadata, ListenV1Results

from bench.common.gateway import Gateway, serve_blocking
from tests.helpers.checksums import checksum
from tests.helpers.realtime_audio import noise, pool_audio, silence, wav_file, wav_payload

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

KEY = "deepgram-test-key"
RECV_TIMEOUT_S = 20.0
CUT = 2 * 21120  # 1 s of speech and the 300 ms pause after it: where its utterance ends


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_API_KEYS": KEY}
    log = tmp_path_factory.mktemp("listen") / "server.log"
    with serve_blocking(env, log, ready_timeout=60) as server:
        yield server


def _environment(server: Gateway) -> DeepgramClientEnvironment:
    ws = f"ws://127.0.0.1:{server.port}"
    return DeepgramClientEnvironment(
        base=server.http, production=ws, agent=ws, agent_rest=server.http
    )


def _speech_pause_speech() -> bytes:
    rng = np.random.default_rng(11)
    parts = [noise(rng, 1.0, 16000), silence(0.6, 16000), noise(rng, 0.8, 16000)]
    return np.concatenate(parts).astype("<i2").tobytes()


async def test_the_async_sdk_streams_finalizes_and_closes_with_exact_transcripts(
    gateway: Gateway,
) -> None:
    audio = _speech_pause_speech()
    client = AsyncDeepgramClient(api_key=KEY, environment=_environment(gateway))
    results: list[ListenV1Results] = []
    async with client.listen.v1.connect(
        model="nova-3",
        encoding="linear16",
        sample_rate=16000,
        interim_results="true",
        punctuate="true",
        vad_events="true",
        endpointing=300,
    ) as socket:
        for at in range(0, len(audio), 3200):  # 100 ms messages
            await socket.send_media(audio[at : at + 3200])
        await socket.send_finalize()
        async with asyncio.timeout(RECV_TIMEOUT_S):
            while not results or not results[-1].from_finalize:
                message = await socket.recv()
                if isinstance(message, ListenV1Results):
                    results.append(message)
        await socket.send_keep_alive()
        await socket.send_close_stream()
        async with asyncio.timeout(RECV_TIMEOUT_S):
            metadata = await socket.recv()
    finals = [r for r in results if r.is_final]
    assert [r.channel.alternatives[0].transcript for r in finals] == [
        checksum(audio[:CUT]),
        checksum(audio[CUT:]),
    ]
    assert [(r.speech_final, r.from_finalize) for r in finals] == [(True, False), (False, True)]
    assert any(not r.is_final for r in results)  # interim results
    assert isinstance(metadata, ListenV1Metadata)
    assert metadata.duration == round(len(audio) / 32000, 3)


def test_the_sync_sdk_streams_telephony_mulaw_at_8khz(gateway: Gateway) -> None:
    samples = noise(np.random.default_rng(8), 2.0, 8000)
    wav = wav_file(samples, 8000, subtype="ULAW")
    payload = wav_payload(wav)
    client = DeepgramClient(api_key=KEY, environment=_environment(gateway))
    with client.listen.v1.connect(
        model="nova-2-phonecall", encoding="mulaw", sample_rate=8000, endpointing="false"
    ) as socket:
        for at in range(0, len(payload), 160):  # 20 ms, as a telephony stack sends it
            socket.send_media(payload[at : at + 160])
        socket.send_close_stream()
        messages = list(socket)
    finals = [m for m in messages if isinstance(m, ListenV1Results) and m.is_final]
    assert [m.channel.alternatives[0].transcript for m in finals] == [checksum(pool_audio(wav))]
    assert isinstance(messages[-1], ListenV1Metadata)


def _refused_status(client: DeepgramClient, **params: Any) -> int:
    """The HTTP status the SDK's handshake was refused with (the SDK 7.17's sync client lets
    websockets' own error through where its async one maps it to ``ApiError``)."""
    with (
        pytest.raises((ApiError, websockets.InvalidStatus)) as refused,
        client.listen.v1.connect(model="nova-3", **params),
    ):
        pass
    error = refused.value
    if isinstance(error, ApiError):
        return int(error.status_code or 0)
    assert isinstance(error, websockets.InvalidStatus)
    return int(error.response.status_code)


def test_the_sdk_is_refused_in_the_handshake_with_deepgrams_status(gateway: Gateway) -> None:
    wrong = DeepgramClient(api_key="wrong-key", environment=_environment(gateway))
    assert _refused_status(wrong) == 401
    right = DeepgramClient(api_key=KEY, environment=_environment(gateway))
    assert _refused_status(right, channels=2) == 400


async def _handshake_body(gateway: Gateway, query: str, headers: dict[str, str]) -> tuple[int, Any]:
    url = f"ws://127.0.0.1:{gateway.port}/v1/listen?{query}"
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url, additional_headers=headers):
            pass
    response = refused.value.response
    return response.status_code, json.loads(response.body or b"{}")


async def test_a_refused_handshake_says_why_in_deepgrams_shape(gateway: Gateway) -> None:
    status, body = await _handshake_body(
        gateway, "encoding=opus", {"Authorization": f"Token {KEY}"}
    )
    assert status == 400
    assert body["err_code"] == "Bad Request"
    assert body["err_msg"].startswith("encoding='opus' is not served")
    assert set(body) == {"err_code", "err_msg", "request_id"}
    status, body = await _handshake_body(gateway, "", {"Authorization": "Token nope"})
    assert (status, body["err_code"]) == (401, "INVALID_AUTH")


async def test_a_browser_key_as_subprotocols_is_taken(gateway: Gateway) -> None:
    url = f"ws://127.0.0.1:{gateway.port}/v1/listen"
    async with websockets.connect(url, subprotocols=["token", KEY]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "token"
        await ws.send(json.dumps({"type": "CloseStream"}))
        messages = [json.loads(m) async for m in ws]
    assert [m["type"] for m in messages] == ["Results", "Metadata"]


async def _until_closed(ws: websockets.ClientConnection) -> list[dict[str, Any]]:
    messages = []
    try:
        async for message in ws:
            messages.append(json.loads(message))
    except websockets.ConnectionClosed:
        pass  # closed with an error code: ``close_code`` says which
    return messages


async def test_bad_input_on_one_stream_leaves_another_untouched(gateway: Gateway) -> None:
    audio = _speech_pause_speech()[:CUT]
    url = f"ws://127.0.0.1:{gateway.port}/v1/listen?endpointing=false"
    headers = {"Authorization": f"Token {KEY}"}
    async with (
        websockets.connect(url, additional_headers=headers) as good,
        websockets.connect(url, additional_headers=headers) as bad,
    ):
        await good.send(audio[:16000])
        await bad.send(b"OggS" + bytes(1000))  # a container we do not decode
        await good.send(audio[16000:])
        await good.send(json.dumps({"type": "CloseStream"}))
        async with asyncio.timeout(RECV_TIMEOUT_S):
            bad_messages = await _until_closed(bad)
            good_messages = await _until_closed(good)
    assert bad.close_code == 1008
    assert bad_messages[-1]["description"].startswith("DATA-0000: Ogg audio is not decoded")
    finals = [m for m in good_messages if m["type"] == "Results" and m["is_final"]]
    assert [m["channel"]["alternatives"][0]["transcript"] for m in finals] == [checksum(audio)]
    assert good.close_code == 1000
    async with httpx.AsyncClient(trust_env=False) as http:  # a Token key, as Deepgram's
        metrics = (await http.get(f"{gateway.http}/metrics", headers=headers)).text
    assert 'asr_listen_errors_total{code="1008"}' in metrics
