from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from workers.ipc.slab import AttachedSlab, Slab
from workers.ipc.wire import SlabLayout


def test_attached_slab_reads_what_the_parent_wrote() -> None:
    layout = SlabLayout(slot_bytes=64, slot_count=3)
    samples = np.arange(-16, 16, dtype=np.int16)
    with Slab(layout) as slab:
        slab.write(2, samples.tobytes())
        attached = AttachedSlab(slab.name, layout)
        try:
            copy = attached.read(2, samples.nbytes)
            slab.write(2, bytes(samples.nbytes))  # the reader holds a copy, not a view
            np.testing.assert_array_equal(copy, samples)
        finally:
            attached.close()


def test_close_unlinks_and_is_safe_twice() -> None:
    slab = Slab(SlabLayout(slot_bytes=64, slot_count=1))
    path = Path("/dev/shm") / slab.name
    assert path.exists()
    slab.close()
    slab.close()
    assert not path.exists()


def test_write_after_close_raises() -> None:
    slab = Slab(SlabLayout(slot_bytes=64, slot_count=1))
    slab.close()
    with pytest.raises(RuntimeError, match="closed"):
        slab.write(0, b"\0\0")


def test_write_must_fit_the_slot() -> None:
    with (
        Slab(SlabLayout(slot_bytes=4, slot_count=2)) as slab,
        pytest.raises(ValueError, match="does not fit"),
    ):
        slab.write(0, b"\0" * 6)


def test_slab_names_carry_the_owner_pid() -> None:
    with Slab(SlabLayout(slot_bytes=2, slot_count=1)) as slab:
        assert str(os.getpid()) in slab.name


def test_every_page_is_allocated_when_the_slab_is_made() -> None:
    """A tmpfs page first touched when /dev/shm is full is a SIGBUS in the writer (the
    server): the slab must hold its pages before any audio is written."""
    layout = SlabLayout(slot_bytes=32768, slot_count=8)
    with Slab(layout) as slab:
        stat = (Path("/dev/shm") / slab.name).stat()
        assert stat.st_size == layout.size
        assert stat.st_blocks * 512 >= layout.size
