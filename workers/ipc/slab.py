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

import errno
import mmap
import os
import secrets
from _posixshmem import shm_open, shm_unlink
from multiprocessing import resource_tracker

import numpy as np

from shared.audio import Samples
from workers.ipc.os_error import describe, size_text
from workers.ipc.wire import SlabLayout

SLAB_PREFIX = "asrgw_"
SHM_DIR = "/dev/shm"  # where shm_open(3) keeps segments on Linux


class SlabError(Exception):
    """No slab could be made; the message says why, in one line. ``errno``: the
    ``OSError``'s (``ENOSPC``: no room in /dev/shm, ``EMFILE``: no descriptor free)."""

    def __init__(self, message: str, errno: int | None) -> None:
        super().__init__(message)
        self.errno = errno


class Slab:
    """The parent's side: creates the segment, writes audio into slots, unlinks it."""

    def __init__(self, layout: SlabLayout) -> None:
        self.layout = layout
        self.name = f"{SLAB_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        self._map: mmap.mmap | None = _create(self.name, layout.size)
        self._buf: memoryview | None = memoryview(self._map)

    def write(self, slot: int, data: bytes | memoryview) -> None:
        if self._buf is None:
            raise RuntimeError("the slab is closed")
        self._buf[self.layout.bounds(slot, len(data))] = data

    def close(self) -> None:
        """Unmap and unlink; safe to call twice."""
        mapping, self._map = self._map, None
        if mapping is None:
            return
        buf, self._buf = self._buf, None
        if buf is not None:
            buf.release()
        mapping.close()
        try:
            shm_unlink("/" + self.name)
        except FileNotFoundError:
            pass
        resource_tracker.unregister("/" + self.name, "shared_memory")

    def __enter__(self) -> Slab:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _create(name: str, size: int) -> mmap.mmap:
    """The segment ``name`` with its ``size`` bytes allocated, mapped, and known to the
    resource tracker (which unlinks it should this process die without doing so); removed
    again if any step fails (``SlabError``).

    Not ``SharedMemory(create=True)``: it sizes the segment with ``ftruncate`` alone (no
    page behind it), and when its mapping fails it unregisters a name it never registered,
    which the tracker prints as a traceback.
    """
    try:
        fd = shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
    except OSError as exc:
        raise SlabError(_cannot(size, exc), exc.errno) from None
    try:
        try:
            os.posix_fallocate(fd, 0, size)
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        try:
            resource_tracker.register("/" + name, "shared_memory")
        except BaseException:
            mapping.close()
            raise
    except BaseException as exc:
        try:
            shm_unlink("/" + name)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise SlabError(_cannot(size, exc), exc.errno) from None
        raise
    return mapping


def _cannot(size: int, exc: OSError) -> str:
    free = ""
    if exc.errno == errno.ENOSPC:
        stat = os.statvfs(SHM_DIR)
        free = f"; {size_text(stat.f_bavail * stat.f_frsize)} free there"
    return f"cannot create a {size_text(size)} slab in {SHM_DIR}: {describe(exc)}{free}"


class AttachedSlab:
    """The worker's side: maps the parent's segment by name, reads slots, never unlinks."""

    def __init__(self, name: str, layout: SlabLayout) -> None:
        self.layout = layout
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
