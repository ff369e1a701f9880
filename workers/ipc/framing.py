"""multiprocessing.Connection's framing, sans I/O, for the ends of a worker's pipes that the
parent reads and writes without blocking (``workers.ipc.results``, ``workers.ipc.sender``);
the worker's ends are plain ``Connection`` objects that speak the same framing."""

from __future__ import annotations

import struct

# multiprocessing.Connection's framing: a signed 32-bit big-endian length, or -1 and then an
# unsigned 64-bit one for a payload of 2 GiB or more; then the payload.
_LENGTH = struct.Struct("!i")
_LONG_LENGTH = struct.Struct("!Q")
_LONG = -1
# Connection itself sends a long length only from 2 GiB up; so do we.
_LONGEST_SHORT = 0x7FFFFFFF


def encode_frame(payload: bytes) -> bytes:
    """``payload`` framed as ``Connection.recv_bytes`` reads it."""
    if len(payload) > _LONGEST_SHORT:
        return _LENGTH.pack(_LONG) + _LONG_LENGTH.pack(len(payload)) + payload
    return _LENGTH.pack(len(payload)) + payload


class FramingError(ValueError):
    """The bytes are not multiprocessing's framing: a frame length below zero."""


class FrameDecoder:
    """Cuts multiprocessing's frames out of bytes as they arrive, in any pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def pending_bytes(self) -> int:
        """Bytes of a frame begun and not yet whole."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add ``data``; return the payloads of the frames now whole, in order."""
        buffer = self._buffer
        buffer += data
        payloads: list[bytes] = []
        start = 0
        while len(buffer) - start >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(buffer, start)
            header = _LENGTH.size
            if size == _LONG:
                if len(buffer) - start < _LENGTH.size + _LONG_LENGTH.size:
                    break
                (size,) = _LONG_LENGTH.unpack_from(buffer, start + _LENGTH.size)
                header += _LONG_LENGTH.size
            elif size < 0:
                raise FramingError(f"a frame's length reads {size}")
            end = start + header + size
            if len(buffer) < end:
                break
            payloads.append(bytes(buffer[start + header : end]))
            start = end
        del buffer[:start]
        return payloads
