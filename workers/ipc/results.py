"""The parent's end of a worker's results pipe: whole messages, never a blocking read.

The worker writes with ``Connection.send`` (a pickled tuple of messages in
multiprocessing's framing). The parent must not use ``Connection.recv`` on its end: that
reads a frame in several ``read`` calls and assumes the descriptor blocks, which it does
not once an event loop polls it (uvloop, like libuv everywhere, makes every descriptor it
watches non-blocking). A result larger than what the pipe holds at that moment then raised
``BlockingIOError`` half-way through a frame, and the rest of the stream was garbage.

So the frames are cut by ``workers.ipc.framing.FrameDecoder`` (sans I/O) from whatever
:class:`ResultReader` could read without blocking, under any event loop.
"""

from __future__ import annotations

import os
import pickle
from multiprocessing.connection import Connection

from shared.messages import WorkerMessage
from workers.ipc.framing import FrameDecoder

# What one read takes at most, into a buffer kept for the reader's life: a pipe holds 64
# KiB by default (up to 1 MiB where raised), so one read takes everything waiting.
READ_BYTES = 1 << 18


class ResultReader:
    """Reads a worker's results pipe without ever blocking, whatever the event loop.

    ``read`` returns the payload of every whole frame that could be read now (a pickled
    batch of messages: :func:`unpickle_batch`), and whether the worker's end is closed
    (EOF: it exited, or closed its pipe). Half a frame waits in the decoder for the next
    read. The caller waits for the descriptor to be readable
    (``anyio.wait_readable(reader.fileno())``) between reads.
    """

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._fd = connection.fileno()
        os.set_blocking(self._fd, False)
        self._decoder = FrameDecoder()
        self._chunk = bytearray(READ_BYTES)
        self._view = memoryview(self._chunk)

    def fileno(self) -> int:
        """Raises ``OSError`` once the connection is closed, as ``Connection.fileno`` does:
        the number may already name another file."""
        return self._connection.fileno()

    @property
    def closed(self) -> bool:
        return self._connection.closed

    def read(self) -> tuple[list[bytes], bool]:
        """The payloads readable now, and ``True`` once the pipe has read EOF.

        Raises ``OSError`` for a read that failed other than by having nothing to read
        (the descriptor closed under us), and :class:`FramingError` for bytes that are not
        frames.
        """
        self._connection.fileno()  # raises OSError where it was closed under us
        payloads: list[bytes] = []
        ended = False
        while True:
            try:
                count = os.readv(self._fd, (self._chunk,))
            except (BlockingIOError, InterruptedError):
                break
            if not count:
                ended = True
                break
            payloads += self._decoder.feed(self._view[:count])
            if count < READ_BYTES:
                break  # the pipe is drained: the next read would only say so
        return payloads, ended

    def close(self) -> None:
        self._connection.close()


def unpickle_batch(payload: bytes) -> tuple[WorkerMessage, ...]:
    """A payload's messages; raises whatever unpickling raises (a reduce function may raise
    anything), which means the worker sent something that cannot be read."""
    batch: tuple[WorkerMessage, ...] = pickle.loads(payload)
    return batch
