"""A WebSocket client on a plain socket, for the live tests that send what a WebSocket
library would refuse to (RFC 6455 frames laid out by hand) or read slowly: its frames, its
handshake, and a wait for the server to have no session left."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
from dataclasses import dataclass, field

import anyio
import httpx

from bench.common.gateway import Gateway
from tests.helpers.timing import within

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
