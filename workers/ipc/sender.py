"""The parent's end of a worker's command channel: headers (and audio) sent, never blocking.

``ShmSender`` writes the audio into the worker's slab and the header down its pipe;
``QueueSender`` puts both on its queue (``workers.ipc.channel``).
"""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from typing import Protocol

from shared.messages import StreamOptions
from workers.ipc.channel import QueueItem
from workers.ipc.framing import encode_frame
from workers.ipc.slab import Slab
from workers.ipc.wire import FLAG_FINAL, NO_SLOT, CommandHeader, CommandKind


class CommandSender(Protocol):
    """The parent's end. ``send`` never blocks: what the pipe cannot take at once waits in
    ``pending_bytes`` until ``flush`` (called when the pipe is writable) gets it out."""

    def send(self, header: CommandHeader, pcm: bytes | memoryview = b"") -> None: ...

    @property
    def pending_bytes(self) -> int: ...

    def fileno(self) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def audio_header(stream_id: int, seq: int, slot: int, length: int, final: bool) -> CommandHeader:
    return CommandHeader(
        CommandKind.AUDIO,
        stream_id,
        seq=seq,
        slot=slot,
        length=length,
        flags=FLAG_FINAL if final else 0,
        sent_ns=time.monotonic_ns(),
    )


def open_header(stream_id: int, options: StreamOptions) -> CommandHeader:
    return CommandHeader(CommandKind.OPEN, stream_id, options=options)


class ShmSender:
    """Headers go down a non-blocking pipe, in the order sent.

    Audio headers are bounded by the slot credits, but OPEN and CLOSE are not: a worker that
    stopped reading (hung) would fill the 64 KiB pipe buffer, and a blocking write would then
    freeze the event loop, and with it every session and the watchdog that would kill the
    worker. So a write the pipe cannot take waits in ``_pending`` instead.

    A worker that is gone (the pipe's reader closed: ``BrokenPipeError``) is no error of the
    sender's: what waited is dropped, ``flush`` returns, and ``send`` raises
    ``BrokenPipeError`` from then on. The pool learns of the death from the worker's
    results pipe (EOF), which is where it fails the worker's streams.
    """

    def __init__(self, connection: Connection, slab: Slab) -> None:
        self._connection = connection
        self._fd = connection.fileno()
        os.set_blocking(self._fd, False)
        self._slab = slab
        self._pending = bytearray()
        self._gone = False

    def send(self, header: CommandHeader, pcm: bytes | memoryview = b"") -> None:
        if self._gone:
            raise BrokenPipeError("the worker's command pipe is closed")
        if header.slot != NO_SLOT:
            self._slab.write(header.slot, pcm)
        payload = header.pack()
        # Framed as the worker's Connection.recv_bytes reads it; written here, non-blocking.
        frame = encode_frame(payload)
        if self._pending:
            self._pending += frame  # behind what is already waiting: order is kept
            return
        written = self._write(frame)
        if self._gone:
            raise BrokenPipeError("the worker's command pipe is closed")
        if written < len(frame):
            self._pending += frame[written:]

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def fileno(self) -> int:
        return self._fd

    def flush(self) -> None:
        while self._pending:
            written = self._write(self._pending)
            if not written:
                return
            del self._pending[:written]

    def _write(self, data: bytes | bytearray) -> int:
        try:
            return os.write(self._fd, data)
        except BlockingIOError:
            return 0
        except OSError:
            # BrokenPipeError (EPIPE), or the like: nobody reads this pipe any more. What
            # waited here was for a worker that will never see it.
            self._gone = True
            self._pending.clear()
            return 0

    def close(self) -> None:
        self._pending.clear()
        self._connection.close()


class QueueSender:
    def __init__(self, commands: Queue[QueueItem]) -> None:
        self._commands = commands

    def send(self, header: CommandHeader, pcm: bytes | memoryview = b"") -> None:
        # Never blocks: the queue's feeder thread does the writing.
        self._commands.put((header.pack(), bytes(pcm)))

    @property
    def pending_bytes(self) -> int:
        return 0

    def fileno(self) -> int:
        raise NotImplementedError("the queue transport has no pipe of its own to flush")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._commands.close()
        # The feeder thread would otherwise block interpreter exit on a dead worker's pipe.
        self._commands.cancel_join_thread()
