"""Client mistakes and abuse against a real uvicorn with real checksum workers, over a raw
socket where a WebSocket library would refuse to send what we send: no frame of a client's
making puts a traceback in the server's log, and a flood of tiny frames is closed."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import END, checksum, config
from tests.helpers.raw_websocket import (
    BINARY,
    CLOSE,
    CONT,
    PING,
    TEXT,
    RawClient,
    frame,
    wait_for_no_session,
)
from tests.helpers.timing import within

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# -- frames no client should send ----------------------------------------------------------

# Each: what the client sends after the handshake, and the close codes that may answer it.
BAD_FRAMES = [
    pytest.param([frame(TEXT, b"\xff\xfe")], {1007}, id="text-not-utf8"),
    pytest.param(
        [frame(TEXT, config().encode()), frame(TEXT, b'{"wav_name": "\xc3\x28"}')],
        {1007},
        id="text-not-utf8-mid-session",
    ),
    pytest.param(
        [frame(TEXT, b'{"mode": "onl', fin=False), frame(CONT, b'ine"}\xed\xa0\x80')],
        {1007},
        id="fragmented-text-not-utf8",
    ),
    pytest.param([frame(TEXT, config().encode(), masked=False)], {1002}, id="unmasked"),
    pytest.param([frame(BINARY, b"\x00\x01", rsv=4)], {1002}, id="rsv1-without-extension"),
    pytest.param([frame(0x3, b"x")], {1002}, id="reserved-opcode"),
    pytest.param([frame(PING, bytes(126))], {1002}, id="control-frame-too-long"),
    pytest.param([frame(PING, b"x", fin=False)], {1002}, id="fragmented-control-frame"),
    pytest.param([frame(CONT, b"x")], {1002}, id="continuation-without-start"),
    pytest.param(
        [frame(TEXT, b"{", fin=False), frame(TEXT, b"}")], {1002}, id="new-message-mid-fragment"
    ),
    pytest.param([frame(CLOSE, struct.pack("!H", 999))], {1002}, id="close-code-invalid"),
    pytest.param([frame(CLOSE, struct.pack("!H", 1000) + b"\xff")], {1007}, id="close-reason-bad"),
    pytest.param([frame(CLOSE, b"\x03")], {1002}, id="close-payload-one-byte"),
    pytest.param(  # a length header far over --ws-max-size, and no payload
        [bytes([0x82, 0xFF]) + struct.pack("!Q", 1 << 40) + bytes(4)], {1009}, id="length-huge"
    ),
    pytest.param([frame(BINARY, b"\x00\x01")[:3]], {None}, id="cut-mid-frame"),
    pytest.param([], {None}, id="cut-after-handshake"),
    pytest.param(
        [
            frame(TEXT, config().encode()),
            frame(CLOSE, struct.pack("!H", 1000)),
            frame(BINARY, b"x"),
        ],
        {1000},
        id="frame-after-close",
    ),
]


@pytest.fixture(scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    log = tmp_path_factory.mktemp("abuse") / "server.log"
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_MAX_FRAMES_PER_SECOND": "200"}
    async with serve(env, log) as server:
        yield server


@pytest.mark.parametrize(("frames", "codes"), BAD_FRAMES)
async def test_a_bad_frame_gets_a_close_code_and_one_log_line_at_most(
    live: Gateway, frames: list[bytes], codes: set[int | None]
) -> None:
    before = live.output().splitlines()

    def exchange() -> int | None:
        client = RawClient.connect(live.port)
        try:
            for data in frames:
                client.send(data)
            if codes == {None}:
                return None  # we cut the connection: nobody to answer
            code, _ = client.read_until_close()
            return code
        finally:
            client.close()

    with within(30):
        code = await anyio.to_thread.run_sync(exchange)
        await wait_for_no_session(live)
    assert code in codes
    new = live.output().splitlines()[len(before) :]
    # uvicorn's own lines for the connection (open, accepted, closed) aside, at most one.
    ours = [line for line in new if not _connection_line(line)]
    assert len(ours) <= 1, ours
    assert not [line for line in new if "Traceback" in line or line.startswith("ERROR")], new


def _connection_line(line: str) -> bool:
    return line.startswith("INFO:") and (
        "connection open" in line
        or "connection closed" in line
        or '"WebSocket /"' in line
        or "HTTP/1.1" in line
    )


async def test_the_server_log_holds_no_traceback_after_every_bad_frame(live: Gateway) -> None:
    """Runs after the cases above (file order): nothing in the whole log either."""
    log = live.output()
    assert "Traceback" not in log
    assert "ERROR" not in log
    assert log.count("Invalid UTF-8 sequence received from client.") == 3
    assert "WARNING:  Invalid UTF-8 sequence received from client." in log


# -- a flood of tiny frames ----------------------------------------------------------------


async def test_a_flood_of_tiny_frames_is_closed_with_our_error_frame_and_1008(
    live: Gateway,
) -> None:
    before = live.output()
    sent = 0
    async with connect(
        live.url, subprotocols=[Subprotocol("binary")], compression=None, proxy=None
    ) as ws:
        with within(60):
            await ws.send(config())
            try:
                while sent < 1_000_000:  # as fast as the client can: 1-2 byte frames
                    await ws.send(b"\x01\x02" if sent % 2 else b"\x03")
                    sent += 1
                    if sent % 64 == 0:
                        await anyio.lowlevel.checkpoint()  # reading too: its close stops us
            except ConnectionClosed:
                pass
            messages: list[dict[str, object]] = []
            try:
                while True:
                    messages.append(json.loads(await ws.recv()))
            except ConnectionClosed:
                pass
    assert ws.close_code == 1008
    (error,) = [m for m in messages if m.get("type") == "error"]
    assert error["code"] == 1008
    assert "ASR_MAX_FRAMES_PER_SECOND" in str(error["message"])
    assert sent < 1_000_000  # closed, not outlasted
    await wait_for_no_session(live)
    new = live.output()[len(before) :]
    assert new.count("ASR_MAX_FRAMES_PER_SECOND") == 1
    assert "Traceback" not in new


async def test_a_good_session_after_the_flood_verifies(live: Gateway) -> None:
    pcm = bytes(range(256)) * 150
    async with connect(live.url, compression=None, proxy=None) as ws:
        await ws.send(config(mode="offline"))
        for start in range(0, len(pcm), 1920):  # unpaced, in FunASR's 60 ms frames
            await ws.send(pcm[start : start + 1920])
        await ws.send(END)
        with within(30):
            final = json.loads(await ws.recv())
    assert final["text"] == checksum(pcm)
