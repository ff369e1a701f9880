"""One preallocated shared-memory slab per worker, cut into fixed slots.

Only the parent creates and unlinks a slab. The worker attaches by name without telling its
resource tracker: on Python 3.11 the tracker a spawned worker shares with its parent would
otherwise either unlink the segment when the worker exits or complain that the parent's
later unregister names an unknown segment (Python 3.13 adds ``track=False`` for this).

A slab is given all its pages when it is made. tmpfs gives a page at its first touch, and
a page it has no room for is a SIGBUS in whoever touches it: the parent, writing audio
into a slot, so the whole server. Allocated up front, a full ``/dev/shm`` is an error at
creation instead, which a worker's start reports (and a restart retries).
"""

from __future__ import annotations

import mmap
import os
import secrets
from multiprocessing import shared_memory

import numpy as np

from shared.audio import Samples
from workers.ipc.os_error import describe, size_text
from workers.ipc.wire import SlabLayout

SLAB_PREFIX = "asrgw_"
SHM_DIR = "/dev/shm"  # where shm_open(3) keeps segments on Linux


class SlabError(Exception):
    """No slab could be made; the message says why, in one line."""


class Slab:
    """The parent's side: creates the segment, writes audio into slots, unlinks it."""

    def __init__(self, layout: SlabLayout) -> None:
        self.layout = layout
        name = f"{SLAB_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        self._shm: shared_memory.SharedMemory | None = _create(name, layout.size)
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


def _create(name: str, size: int) -> shared_memory.SharedMemory:
    """The segment ``name`` with ``size`` bytes allocated, mapped; removed again if any step
    fails (``SlabError``)."""
    from _posixshmem import shm_open, shm_unlink

    try:
        fd = shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    except OSError as exc:
        raise SlabError(_cannot(size, exc)) from None
    try:
        try:
            os.posix_fallocate(fd, 0, size)
            # Attaching maps it and tells the resource tracker, as creating it would.
            return shared_memory.SharedMemory(name=name)
        finally:
            os.close(fd)
    except BaseException as exc:
        try:
            shm_unlink("/" + name)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise SlabError(_cannot(size, exc)) from None
        raise


def _cannot(size: int, exc: OSError) -> str:
    try:
        stat = os.statvfs(SHM_DIR)
        free = f"; {size_text(stat.f_bavail * stat.f_frsize)} free there"
    except OSError:
        free = ""
    return f"cannot create a {size_text(size)} slab in {SHM_DIR}: {describe(exc)}{free}"


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
