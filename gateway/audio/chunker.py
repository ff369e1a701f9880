"""Cuts a pass's audio into model chunks of a fixed byte length, whatever the client's framing."""

from __future__ import annotations


class ChunkCutter:
    """Buffers PCM and hands out whole chunks of exactly ``chunk_bytes`` bytes.

    Clients frame audio however they like (FunASR's own send 60 ms frames, others send a
    few bytes or a whole file at once); the model wants fixed chunks, so we cut by bytes.
    """

    def __init__(self, chunk_bytes: int) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
        self.chunk_bytes = chunk_bytes
        # A bytearray grows in place and drops its head cheaply, so many tiny frames cost
        # linear time, not a copy of the whole buffer per frame.
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held back, waiting for the rest of their chunk."""
        return len(self._buffer)

    def push(self, pcm: bytes) -> list[bytes]:
        """Add PCM; return every chunk now complete, oldest first (often none)."""
        size = self.chunk_bytes
        if not self._buffer and len(pcm) == size:
            return [bytes(pcm)]  # the common case of frames that already match
        self._buffer += pcm
        whole = len(self._buffer) - len(self._buffer) % size
        if not whole:
            return []
        view = memoryview(self._buffer)
        try:
            chunks = [bytes(view[start : start + size]) for start in range(0, whole, size)]
        finally:
            # A bytearray cannot be resized while a memoryview of it is alive.
            view.release()
        del self._buffer[:whole]
        return chunks

    def flush(self) -> bytes:
        """Return and forget the partial chunk held back (empty if there is none)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest
