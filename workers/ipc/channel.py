"""What joins the parent to one worker: its command channel, as the spawned worker gets it.

``shm``: a pipe for the 40-byte headers and the name of the worker's slab, where the audio
is. ``queue``: a ``multiprocessing.Queue`` of (header, audio bytes), as the original
write-up did, kept so that the benchmark can compare the two on the same machine. Both use
the same slot numbers as credits, so the backpressure is identical and only the way the
bytes travel differs. The parent's end is ``sender``, the worker's ``receiver``.
"""

from __future__ import annotations

from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.queues import Queue

from workers.ipc.wire import SlabLayout

QueueItem = tuple[bytes, bytes]  # a packed header, and the audio's bytes


@dataclass(frozen=True, slots=True)
class ShmChannel:
    commands: Connection
    slab_name: str
    layout: SlabLayout


@dataclass(frozen=True, slots=True)
class QueueChannel:
    commands: Queue[QueueItem]


Channel = ShmChannel | QueueChannel
