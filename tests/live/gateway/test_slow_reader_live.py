"""A client that stops reading our results, against a real uvicorn (its default ping
settings) with real checksum workers: closed once a send has waited ASR_SEND_TIMEOUT, with
one log line; our error frame and 1008 if it reads again, a TCP reset if it never does.

The client is a raw socket with a small receive buffer that streams audio producing a
result per 60 ms chunk, until the server stops taking it: by then the kernel's buffers and
uvicorn's write buffer are full of unread results and the gateway's send is blocked.

The server's connections get a small kernel send buffer. With the default one (autotuned
up to 4 MiB on loopback) the send blocks only after ~40 MB of audio, and the client rarely
got there: once its tiny receive buffer is full it drops the server's segments, and the
acknowledgements of its own audio that ride on them; its sends then wait out TCP's
retransmission backoff (52 s seen), and it took that stall for the server's (ss showed
both sides at backoff 8, the server's send buffer nowhere near full).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import anyio
import pytest

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import config
from tests.helpers.raw_websocket import BINARY, TEXT, RawClient, frame, wait_for_no_session
from tests.helpers.timing import within

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SEND_TIMEOUT_S = 1.0
TCP_CLOSE = 7  # tcp_info's tcpi_state after a reset (a FIN would leave CLOSE_WAIT, 8)
SERVER_SEND_BUFFER = 16384  # bytes (the kernel doubles it): blocked after ~200 results
LINE = "the client read no result for 1 s (ASR_SEND_TIMEOUT)"


@pytest.fixture(scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    log = tmp_path_factory.mktemp("slow-reader") / "server.log"
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_SEND_TIMEOUT": "1"}
    async with serve(env, log, send_buffer=SERVER_SEND_BUFFER) as server:
        yield server


def stop_reading(port: int) -> RawClient:
    """Connect, then stream audio without ever reading, until the server stops taking it."""
    client = RawClient.connect(port, receive_buffer=4096)
    # 1920-byte model chunks, each answered (timing: even with an empty text).
    client.send(frame(TEXT, config(chunk_size=[0, 1, 0], timing=True).encode()))
    audio = frame(BINARY, bytes(range(256)) * 75)  # 19200 bytes: ten results
    client.sock.settimeout(1.0)
    frames = offset = stalls = 0
    # The server has stopped reading once nothing goes out for 3 s in a row: a stall of a
    # second can be a busy machine, after which the server would take everything and its
    # own sends might never block. A timed-out send wrote nothing, so frames stay whole.
    while stalls < 3:
        if frames == 20_000:
            raise AssertionError("the server took 384 MB from a client that reads nothing")
        try:
            offset += client.sock.send(audio[offset:])
            stalls = 0
        except TimeoutError:
            stalls += 1
        if offset == len(audio):
            frames, offset = frames + 1, 0
    return client


async def wait_for_line(server: Gateway, before: int) -> None:
    with within(60):
        while LINE not in server.output()[before:]:  # noqa: ASYNC110 (another process's log)
            await anyio.sleep(0.05)


def tcp_state(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


async def test_a_client_that_never_reads_again_is_closed_and_reset(live: Gateway) -> None:
    before = len(live.output())
    client = await anyio.to_thread.run_sync(stop_reading, live.port)
    try:
        await wait_for_line(live, before)
        await wait_for_no_session(live)
        # Our frames cannot reach it: after the close's grace the connection is aborted,
        # not left for TCP to keep open as long as the client acknowledges.
        with within(30):
            while tcp_state(client.sock) != TCP_CLOSE:  # noqa: ASYNC110 (the kernel's state)
                await anyio.sleep(0.05)
    finally:
        client.close()
    log = live.output()[before:]
    assert log.count("ASR_SEND_TIMEOUT") == 1, log
    assert f"closing a session with 1008: {LINE}" in log
    assert "Traceback" not in log
    assert "ERROR" not in log


async def test_a_client_that_reads_again_gets_our_error_frame_and_1008(live: Gateway) -> None:
    before = len(live.output())
    client = await anyio.to_thread.run_sync(stop_reading, live.port)
    try:
        await wait_for_line(live, before)
        client.sock.settimeout(10)
        code, texts = await anyio.to_thread.run_sync(client.read_until_close)
    finally:
        client.close()
    assert code == 1008
    *results, error = texts
    assert len(results) > 100  # what it had left unread
    assert all(result["is_final"] is False for result in results)
    assert error["type"] == "error"
    assert error["code"] == 1008
    assert error["message"] == LINE
    await wait_for_no_session(live)
    log = live.output()[before:]
    assert log.count("ASR_SEND_TIMEOUT") == 1, log
    assert "Traceback" not in log
