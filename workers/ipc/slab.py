"""One preallocated shared-memory slab per worker, cut into fixed slots.

Only the parent creates and unlinks a slab. The worker attaches by name without telling its
resource tracker: on Python 3.11 the tracker a spawned worker shares with its parent would
otherwise either unlink the segment when the worker exits or complain that the parent's
later unregister names an unknown segment (Python 3.13 adds ``track=False`` for this).
"""

from __future__ import annotations

import mmap
import os
import secrets
from multiprocessing import shared_memory

import numpy as np

from shared.audio import Samples
from workers.ipc.wire import SlabLayout

SLAB_PREFIX = "asrgw_"


class Slab:
    """The parent's side: creates the segment, writes audio into slots, unlinks it."""

    def __init__(self, layout: SlabLayout) -> None:
        self.layout = layout
        name = f"{SLAB_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        self._shm: shared_memory.SharedMemory | None = shared_memory.SharedMemory(
            name=name, create=True, size=layout.size
        )
        self.name = name

    def write(self, slot: int, data: bytes | memoryview) -> None:
        if self._shm is None or self._shm.buf is None:
            raise RuntimeError("the slab is closed")
        self._shm.buf[self.layout.bounds(slot, len(data))] = data

    def close(self) -> None:
        """Unmap and unlink; safe to call twice."""
        shm, self._shm = self._shm, None
        if shm is None:
            return
        shm.close()
        try:
            shm.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> Slab:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AttachedSlab:
    """The worker's side: maps the parent's segment by name, reads slots, never unlinks."""

    def __init__(self, name: str, layout: SlabLayout) -> None:
        self.layout = layout
        from _posixshmem import shm_open

        fd = shm_open("/" + name, os.O_RDWR, mode=0o600)
        try:
            self._map: mmap.mmap | None = mmap.mmap(fd, layout.size)
        finally:
            os.close(fd)

    def read(self, slot: int, length: int) -> Samples:
        """A copy of the slot's samples: the slot is handed back before they are used."""
        if self._map is None:
            raise RuntimeError("the slab is closed")
        bounds = self.layout.bounds(slot, length)
        return np.frombuffer(self._map, dtype="<i2", count=length // 2, offset=bounds.start).copy()

    def close(self) -> None:
        mapping, self._map = self._map, None
        if mapping is not None:
            mapping.close()
