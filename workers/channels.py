"""The two command transports between the parent and a worker.

``shm``: audio is written into a slot of the worker's slab; only the fixed 40-byte header
crosses a pipe. ``queue``: header and audio bytes are pickled through a
``multiprocessing.Queue``, as the original write-up did, kept so that the benchmark can
compare the two on the same machine. Both use the same slot numbers as credits, so the
backpressure is identical and only the way the bytes travel differs.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from typing import Protocol

import numpy as np

from shared.messages import StreamOptions
from shared.wire import FLAG_FINAL, NO_SLOT, CommandHeader, CommandKind, SlabLayout
from workers.engines.base import Samples
from workers.slab import AttachedSlab, Slab

QueueItem = tuple[bytes, bytes]

_EMPTY = np.zeros(0, dtype=np.int16)


@dataclass(frozen=True, slots=True)
class Command:
    header: CommandHeader
    samples: Samples | None = None


class CommandSender(Protocol):
    """The parent's end. Calls never block for long: the slot credits bound what is queued."""

    def send(self, header: CommandHeader, pcm: bytes | memoryview = b"") -> None: ...

    def close(self) -> None: ...


class CommandReceiver(Protocol):
    """The worker's end."""

    def receive(self, max_items: int, timeout: float) -> tuple[list[Command], list[int]]:
        """Wait up to ``timeout`` for commands; return them with the slots they freed."""
        ...

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
    def __init__(self, connection: Connection, slab: Slab) -> None:
        self._connection = connection
        self._slab = slab

    def send(self, header: CommandHeader, pcm: bytes | memoryview = b"") -> None:
        if header.slot != NO_SLOT:
            self._slab.write(header.slot, pcm)
        self._connection.send_bytes(header.pack())

    def close(self) -> None:
        self._connection.close()


class ShmReceiver:
    def __init__(self, connection: Connection, slab_name: str, layout: SlabLayout) -> None:
        self._connection = connection
        self._slab = AttachedSlab(slab_name, layout)

    def receive(self, max_items: int, timeout: float) -> tuple[list[Command], list[int]]:
        commands: list[Command] = []
        freed: list[int] = []
        if not self._connection.poll(timeout):
            return commands, freed
        while len(commands) < max_items and self._connection.poll(0):
            header = CommandHeader.unpack(self._connection.recv_bytes())
            samples = None
            if header.kind is CommandKind.AUDIO:
                samples = _EMPTY
                if header.slot != NO_SLOT:
                    samples = self._slab.read(header.slot, header.length)
                    freed.append(header.slot)
            commands.append(Command(header, samples))
        return commands, freed

    def close(self) -> None:
        self._slab.close()
        self._connection.close()


class QueueSender:
    def __init__(self, commands: Queue[QueueItem]) -> None:
        self._commands = commands

    def send(self, header: CommandHeader, pcm: bytes | memoryview = b"") -> None:
        self._commands.put((header.pack(), bytes(pcm)))

    def close(self) -> None:
        self._commands.close()
        # The feeder thread would otherwise block interpreter exit on a dead worker's pipe.
        self._commands.cancel_join_thread()


class QueueReceiver:
    def __init__(self, commands: Queue[QueueItem]) -> None:
        self._commands = commands

    def receive(self, max_items: int, timeout: float) -> tuple[list[Command], list[int]]:
        commands: list[Command] = []
        freed: list[int] = []
        try:
            item = self._commands.get(timeout=timeout)
        except queue.Empty:
            return commands, freed
        while True:
            header = CommandHeader.unpack(item[0])
            samples = None
            if header.kind is CommandKind.AUDIO:
                samples = np.frombuffer(item[1], dtype="<i2")
                if header.slot != NO_SLOT:
                    freed.append(header.slot)
            commands.append(Command(header, samples))
            if len(commands) >= max_items:
                break
            try:
                item = self._commands.get_nowait()
            except queue.Empty:
                break
        return commands, freed

    def close(self) -> None:
        self._commands.close()
