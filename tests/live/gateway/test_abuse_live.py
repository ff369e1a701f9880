"""Client mistakes and abuse against a real uvicorn with real checksum workers, over a raw
socket where a WebSocket library would refuse to send what we send: no frame of a client's
making puts a traceback in the server's log, and a flood of tiny frames is closed."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import anyio.lowlevel
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import END, checksum, config
from tests.helpers.timing import within

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TEXT, BINARY, CLOSE, PING, CONT = 0x1, 0x2, 0x8, 0x9, 0x0


def frame(
    opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, masked: bool = True
) -> bytes:
    """One client frame, as RFC 6455 lays it out; masked with a zero key (the payload
    unchanged) unless ``masked`` is False, which a client must never do."""
    head = bytes([(0x80 if fin else 0) | rsv << 4 | opcode])
    mask_bit = 0x80 if masked else 0
    size = len(payload)
    if size < 126:
        head += bytes([mask_bit | size])
    elif size < 1 << 16:
        head += bytes([mask_bit | 126]) + struct.pack("!H", size)
    else:
        head += bytes([mask_bit | 127]) + struct.pack("!Q", size)
    return head + (bytes(4) if masked else b"") + payload


@dataclass
class RawClient:
    """A WebSocket client on a plain socket: it sends any bytes and reads server frames."""

    sock: socket.socket
    pending: bytearray = field(default_factory=bytearray)

    @classmethod
    def connect(cls, port: int, *, receive_buffer: int | None = None) -> RawClient:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:  # set before connecting: the window it offers
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        client = cls(sock)
        while b"\r\n\r\n" not in client.pending:
            client.pending += client._recv()
        head, _, rest = bytes(client.pending).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        client.pending = bytearray(rest)
        return client

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        return data

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> tuple[int, bytes]:
        """The server's next frame: (opcode, payload). EOFError once the TCP stream ends."""
        while True:
            parsed = _parse(self.pending)
            if parsed is not None:
                opcode, payload, used = parsed
                del self.pending[:used]
                return opcode, payload
            self.pending += self._recv()

    def read_until_close(self) -> tuple[int | None, list[dict[str, object]]]:
        """Every text frame as JSON up to the close frame, and the close code (None: the
        connection ended without one)."""
        texts: list[dict[str, object]] = []
        try:
            while True:
                opcode, payload = self.read_frame()
                if opcode == TEXT:
                    texts.append(json.loads(payload))
                elif opcode == CLOSE:
                    code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                    return code, texts
        except (EOFError, ConnectionResetError):
            return None, texts

    def close(self) -> None:
        self.sock.close()


def _parse(buffer: bytearray) -> tuple[int, bytes, int] | None:
    if len(buffer) < 2:
        return None
    opcode, size, at = buffer[0] & 0x0F, buffer[1] & 0x7F, 2
    if size == 126:
        if len(buffer) < 4:
            return None
        size, at = struct.unpack("!H", buffer[2:4])[0], 4
    elif size == 127:
        if len(buffer) < 10:
            return None
        size, at = struct.unpack("!Q", buffer[2:10])[0], 10
    if len(buffer) < at + size:
        return None
    return opcode, bytes(buffer[at : at + size]), at + size


async def sessions_active(server: Gateway) -> float:
    async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
        metrics = (await http.get("/metrics")).text
    (line,) = [each for each in metrics.splitlines() if each.startswith("asr_sessions_active ")]
    return float(line.split()[1])


async def wait_for_no_session(server: Gateway) -> None:
    with within(30):
        while await sessions_active(server):  # noqa: ASYNC110 (another process's state)
            await anyio.sleep(0.05)


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
