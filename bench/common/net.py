"""A free TCP port on the loopback, for a server about to be started on it."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nobody listens on now (the kernel's pick; free until someone binds it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
