"""An HTTP request sent whole over a raw socket, then the connection reset (RST), as a
client that crashes or is killed after its upload leaves it."""

from __future__ import annotations

import socket
import struct
import time

import httpx


def send_then_reset(
    port: int, request: httpx.Request, hold_s: float, body_bytes: int | None = None
) -> None:
    """Send ``request`` (its head and whole body, or the first ``body_bytes`` of the body)
    to 127.0.0.1:``port``, wait ``hold_s`` without reading, then reset the connection."""
    body = request.read()[:body_bytes]
    target = request.url.raw_path.decode()
    lines = [f"{request.method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in request.headers.items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + body)
        time.sleep(hold_s)
        # Linger on, for zero seconds: close() sends RST rather than FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
