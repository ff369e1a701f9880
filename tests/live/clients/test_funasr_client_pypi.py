"""``funasr-client`` (PyPI, pinned in the dev extras) unchanged, against a real uvicorn with
the checksum engine.

What this client does that a server must take: it ends the audio with
``{"is_speaking": false}`` (no ``is_end``: it asks for no acknowledgement), stops reading at
the first ``is_final: true``, and then its ``close()`` sends ``{"is_speaking": false}`` a
second time and closes with 1000. It cannot see what the server does with that second end,
so each test also reads the gateway's log once its sessions are over. ``merge_messages``
(behind ``file_asr``) indexes ``msg["mode"]`` of every frame and keeps only
``2pass-offline`` ones, as FunASR's C++ server names them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from funasr_client import (
    FunASRClient,
    async_file_asr,
    async_file_asr_stream,
    async_funasr_client,
    file_asr,
    file_asr_stream,
)
from websockets.asyncio.client import ClientConnection

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import funasr_reads
from tests.helpers.live_gateway import (
    CHECKSUM_ENV,
    Wav,
    assert_ended_quietly,
    log_mark,
    write_wavs,
)
from tests.helpers.timing import within

MODES = ["online", "offline", "2pass"]
STREAMING_MODE = {"online": ["online"], "2pass": ["2pass-online"]}
FINAL_MODE = {"online": "online", "offline": "offline", "2pass": "2pass-offline"}
FRAME_BYTES = 1920  # what file_asr sends: 60 ms, chunk_size [5, 10, 5] / chunk_interval 10
SESSION_TIMEOUT_S = 30.0
# merge_messages with no 2pass-offline message in the stream: nothing merged.
NOTHING_MERGED = {"mode": "2pass-offline", "wav_name": "", "text": "", "is_final": True}


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    log = tmp_path_factory.mktemp("funasr-client") / "server.log"
    async with serve(CHECKSUM_ENV, log) as running:
        yield running


@pytest.fixture
def wavs(tmp_path: Path) -> list[Wav]:
    return write_wavs(tmp_path, 3, seed=11, seconds=(1.0, 2.0))


@pytest.fixture
def reentrant_sync_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """funasr-client 0.1.6's sync ``close()`` holds its ``threading.Lock`` and calls
    ``signal_close()``, which takes the lock again: every sync session deadlocks after its
    final result, whatever the server does (``test_sync_close_takes_its_own_lock``). With
    an ``RLock`` the sync client sends exactly what it means to."""
    init = FunASRClient._additional_init

    def with_rlock(self: Any) -> None:
        init(self)
        self.lock = threading.RLock()

    monkeypatch.setattr(FunASRClient, "_additional_init", with_rlock)


def check_messages(messages: list[dict[str, Any]], wav: Wav, mode: str) -> None:
    """Every frame readable by FunASR's clients, none our error frame; the streaming
    partials, each the checksum of a longer prefix of the file; then the first
    ``is_final`` (where the client stops reading), the whole file's checksum."""
    for message in messages:
        funasr_reads(message)
        assert "type" not in message, message
        assert message["wav_name"] == wav.path.name, message  # file_asr's default name
    *partials, final = messages
    prefixes = wav.prefix_ends()
    ends = [prefixes[message["text"]] for message in partials]
    assert ends == sorted(set(ends)), messages
    assert {message["mode"] for message in partials} == set(STREAMING_MODE.get(mode, ())), messages
    assert (final["mode"], final["text"], final["is_final"]) == (
        FINAL_MODE[mode],
        wav.checksum,
        True,
    ), messages


def check_closed_normally(ws: ClientConnection) -> None:
    """The client's close (1000) answered with 1000: no error code from the gateway."""
    assert ws.protocol.close_sent is not None
    assert ws.protocol.close_sent.code == 1000
    assert ws.protocol.close_rcvd is not None, "the gateway sent no close frame"
    assert ws.close_code == 1000, ws.protocol.close_rcvd


def pcm_frames(pcm: bytes) -> list[bytes]:
    return [pcm[start : start + FRAME_BYTES] for start in range(0, len(pcm), FRAME_BYTES)]


def test_sync_close_takes_its_own_lock() -> None:
    """Why ``reentrant_sync_close``: the lock ``close()`` holds when it calls
    ``signal_close()`` is not reentrant. Fails once funasr-client fixes this: then drop
    the workaround."""
    client = FunASRClient("ws://127.0.0.1:1/", blocking=True)
    with client.lock:
        assert not client.lock.acquire(blocking=False)


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_async_file_asr(server: Gateway, wavs: list[Wav], mode: str) -> None:
    """Three files one after another: every message of each (``async_file_asr_stream``),
    and what ``async_file_asr`` merges of it (only ``2pass-offline`` messages)."""
    mark = log_mark(server)
    for wav in wavs:
        with within(SESSION_TIMEOUT_S):
            messages = [
                dict(message) async for message in async_file_asr_stream(wav.path, server.url, mode)
            ]
            merged = await async_file_asr(wav.path, server.url, mode)
        check_messages(messages, wav, mode)
        if mode == "2pass":
            assert merged == {**NOTHING_MERGED, "wav_name": wav.path.name, "text": wav.checksum}
        else:
            assert merged == NOTHING_MERGED
    await assert_ended_quietly(server, mark)


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("reentrant_sync_close")
async def test_sync_file_asr(server: Gateway, wavs: list[Wav], mode: str) -> None:
    """The same with the sync client, in a thread."""

    def recognise(wav: Wav) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        messages = [dict(message) for message in file_asr_stream(wav.path, server.url, mode)]
        return messages, dict(file_asr(wav.path, server.url, mode))

    mark = log_mark(server)
    for wav in wavs:
        with within(SESSION_TIMEOUT_S):
            messages, merged = await anyio.to_thread.run_sync(
                recognise, wav, abandon_on_cancel=True
            )
        check_messages(messages, wav, mode)
        if mode == "2pass":
            assert merged["text"] == wav.checksum
        else:
            assert merged == NOTHING_MERGED
    await assert_ended_quietly(server, mark)


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_async_client_blocking(server: Gateway, wavs: list[Wav], mode: str) -> None:
    """``async_funasr_client(blocking=True)``: send the PCM, ``signal_close()``, ``stream()``
    to the final, ``close()`` (its second ``{"is_speaking": false}``, then 1000): no error
    frame, a normal close, and nothing in the gateway's log."""
    mark = log_mark(server)
    for wav in wavs:
        with within(SESSION_TIMEOUT_S):
            client = async_funasr_client(
                server.url, mode=mode, wav_name=wav.path.name, audio_fs=16_000, blocking=True
            )
            await client.connect()
            ws: ClientConnection = client._ws  # to see how the connection ends
            for frame in pcm_frames(wav.pcm):
                await client.send(frame)
            await client.signal_close()
            messages = [dict(message) async for message in client.stream()]
            assert await client.recv() is None  # past the final: the client reads no more
            await client.close()
        check_messages(messages, wav, mode)
        check_closed_normally(ws)
    await assert_ended_quietly(server, mark)


@pytest.mark.anyio
@pytest.mark.slow
async def test_async_client_recv_with_hotwords(server: Gateway, wavs: list[Wav]) -> None:
    """``hotwords={"阿里巴巴": 20}`` goes out as a JSON object string; ``recv()`` one
    message at a time until the final."""
    wav = wavs[0]
    mark = log_mark(server)
    with within(SESSION_TIMEOUT_S):
        client = async_funasr_client(
            server.url,
            mode="2pass",
            wav_name=wav.path.name,
            hotwords={"阿里巴巴": 20, "达摩院": 10},
            blocking=True,
        )
        hotwords = json.loads(client._get_init_msg())["hotwords"]
        assert json.loads(hotwords) == {"阿里巴巴": 20, "达摩院": 10}  # a string of JSON
        async with client:
            ws: ClientConnection = client._ws
            for frame in pcm_frames(wav.pcm):
                await client.send(frame)
            await client.signal_close()
            messages: list[dict[str, Any]] = []
            while not messages or not messages[-1]["is_final"]:
                messages.append(dict(await client.recv()))
    check_messages(messages, wav, "2pass")
    check_closed_normally(ws)
    await assert_ended_quietly(server, mark)


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
async def test_async_client_callback(server: Gateway, wavs: list[Wav], mode: str) -> None:
    """Non-blocking: messages reach an ``on_message`` callback; ``close()`` waits for the
    final, sends its second end and closes."""
    wav = wavs[0]
    messages: list[dict[str, Any]] = []
    mark = log_mark(server)
    with within(SESSION_TIMEOUT_S):
        client = async_funasr_client(server.url, mode=mode, wav_name=wav.path.name)

        def on_message(message: dict[str, Any]) -> None:  # run in the loop's executor
            messages.append(dict(message))

        client.on_message(on_message)  # what ``@client.on_message`` does
        async with client:
            ws: ClientConnection = client._ws
            for frame in pcm_frames(wav.pcm):
                await client.send(frame)
    check_messages(messages, wav, mode)
    check_closed_normally(ws)
    await assert_ended_quietly(server, mark)
