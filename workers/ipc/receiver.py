"""The worker's end of its command channel: the commands waiting, with their audio.

``ShmReceiver`` reads the headers from its pipe and the audio from the slab (a copy: the
slot is handed back before the audio is used); ``QueueReceiver`` takes both from its queue
(``workers.ipc.channel``).
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue
from typing import Protocol

import numpy as np

from shared.audio import Samples
from workers.ipc.channel import QueueItem
from workers.ipc.slab import AttachedSlab
from workers.ipc.wire import NO_SLOT, CommandHeader, CommandKind, SlabLayout

_EMPTY = np.zeros(0, dtype=np.int16)


@dataclass(frozen=True, slots=True)
class Command:
    header: CommandHeader
    samples: Samples | None = None


class CommandReceiver(Protocol):
    """The worker's end."""

    def receive(self, max_items: int, timeout: float) -> tuple[list[Command], list[int]]:
        """Wait up to ``timeout`` for commands; return them with the slots they freed."""
        ...

    def close(self) -> None: ...


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
