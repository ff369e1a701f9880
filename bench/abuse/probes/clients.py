"""The attacker's clients: WebSocket connections and raw HTTP/1.1 exchanges that count
every byte they send and receive into the probe's tally, from an address of their own.

Bytes are the application's: the HTTP handshake or request as written, WebSocket frames
with their headers (a client's are masked: 4 bytes more). TCP/IP headers are not counted.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from bench.abuse.probes.attack import Tally
from bench.common import messages

FRAME_60MS = 1920  # bytes of 16 kHz int16 PCM: FunASR's clients' framing
FRAME_20MS = 640  # the least audio that puts the idle deadline off
CHUNK_600MS = 19200
OPEN_TIMEOUT_S = 10.0


def config(**fields: object) -> str:
    """A FunASR config opening an online utterance; ``fields`` over the defaults."""
    return messages.config(**{"wav_name": "probe", **fields})


def frame_bytes(payload: int, *, masked: bool) -> int:
    """A WebSocket frame's size on the wire, its header included."""
    header = 2 if payload < 126 else 4 if payload < 65536 else 10
    return payload + header + (4 if masked else 0)


def now() -> float:
    return time.monotonic()


class Ws:
    """One counted WebSocket connection of the attacker's."""

    def __init__(self, connection: ClientConnection, tally: Tally) -> None:
        self.connection = connection
        self._tally = tally
        self.opened_at = now()
        self.error: dict[str, Any] | None = None  # our error frame, if one came
        self.closed_at = 0.0  # when the close was seen

    async def send(self, message: str | bytes) -> None:
        size = len(message.encode()) if isinstance(message, str) else len(message)
        self._tally.sent += frame_bytes(size, masked=True)
        await self.connection.send(message)

    async def recv(self, timeout: float | None = None) -> str | bytes | None:
        """The next frame; None when the connection closed (or nothing came in time)."""
        try:
            message = await asyncio.wait_for(self.connection.recv(), timeout)
        except ConnectionClosed:
            self.closed_at = self.closed_at or now()
            return None
        except TimeoutError:
            return None
        size = len(message.encode()) if isinstance(message, str) else len(message)
        self._tally.received += frame_bytes(size, masked=False)
        if isinstance(message, str) and '"type": "error"' in message[:40]:
            self.error = json.loads(message)
        return message

    async def json(self, timeout: float | None = None) -> dict[str, Any] | None:
        message = await self.recv(timeout)
        if message is None:
            return None
        value: dict[str, Any] = json.loads(message)
        return value

    async def until_closed(self, timeout: float = 120.0) -> int | None:
        """Read until the server closes: its close code (1006: no close frame; None: still
        open after ``timeout``)."""
        deadline = now() + timeout
        while now() < deadline:
            if await self.recv(max(0.0, deadline - now())) is None and self.closed:
                return self.code
        return None

    @property
    def closed(self) -> bool:
        return self.connection.close_code is not None or self.connection.state.name == "CLOSED"

    @property
    def code(self) -> int | None:
        return self.connection.close_code

    @property
    def reason(self) -> str:
        return self.connection.close_reason or ""

    def abort(self) -> None:
        """Drop the TCP connection without a close frame (a phone losing its network)."""
        self.connection.transport.abort()

    async def aclose(self) -> None:
        try:
            await asyncio.wait_for(self.connection.close(), 5)
        except (TimeoutError, OSError):
            self.abort()


async def open_ws(
    url: str,
    source: str,
    tally: Tally,
    *,
    subprotocols: list[str] | None = None,
    receive_buffer: int | None = None,
) -> Ws:
    """A WebSocket from ``source``; its handshake counted. ``receive_buffer``: a small
    SO_RCVBUF, so that a client that stops reading leaves little in the kernel."""
    kwargs: dict[str, Any] = {}
    if receive_buffer is not None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind((source, 0))
        sock.setblocking(False)
        port = int(url.split(":")[2].split("/")[0])
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        kwargs["sock"] = sock
    else:
        kwargs["local_addr"] = (source, 0)
    tally.connections += 1
    connection = await connect(
        url,
        compression=None,
        max_size=None,
        proxy=None,
        open_timeout=OPEN_TIMEOUT_S,
        ping_interval=None,
        close_timeout=2,
        subprotocols=[Subprotocol(p) for p in subprotocols] if subprotocols else None,
        **kwargs,
    )
    tally.sent += len(connection.request.serialize()) if connection.request else 0
    tally.received += len(connection.response.serialize()) if connection.response else 0
    return Ws(connection, tally)


class Http:
    """One keep-alive HTTP/1.1 connection, counted."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tally: Tally):
        self.reader = reader
        self.writer = writer
        self._tally = tally

    @classmethod
    async def open(cls, port: int, source: str, tally: Tally) -> Http:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, local_addr=(source, 0), limit=1 << 20
        )
        tally.connections += 1
        return cls(reader, writer, tally)

    async def write(self, data: bytes) -> None:
        self._tally.sent += len(data)
        self.writer.write(data)
        await self.writer.drain()

    async def get(self, path: str) -> tuple[int, bytes]:
        await self.write(f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode())
        return await self.response()

    async def response(self) -> tuple[int, bytes]:
        """The status and the body of the next response (Content-Length or chunked)."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        self._tally.received += len(head)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])
        }
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
            self._tally.received += len(body)
            return status, body
        body = b""
        while headers.get("transfer-encoding") == "chunked":
            size_line = await self.reader.readuntil(b"\r\n")
            size = int(size_line.strip(), 16)
            data = await self.reader.readexactly(size + 2)
            self._tally.received += len(size_line) + len(data)
            body += data[:-2]
            if size == 0:
                break
        return status, body

    async def aclose(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass
