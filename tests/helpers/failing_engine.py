"""A checksum engine that fails on demand, for the pool's fault tests.

Runs in real spawned workers: ``WorkerPool(settings, engine_loader=load)``. What triggers a
fault is in what a test sends, so that one worker serves good and failing streams side by
side:

- a piece that starts with :data:`FAIL_STEP`: ``feed`` raises, failing its whole step;
- a stream opened with the hotword :data:`FAIL_OPEN`: ``open_stream`` raises;
- a piece that starts with :data:`CLOSE_RESULTS`: the worker closes its results pipe and
  then sleeps, alive (the parent reads EOF from a worker that has not exited);
- a piece that starts with :data:`CLOSE_COMMANDS`: the worker closes its end of its command
  pipe, answers the piece and serves on (its next read fails);
- a piece that starts with :data:`UNREADABLE`: its result pickles in the worker but cannot
  be unpickled in the parent;
- a piece that starts with :data:`HUGE_RESULT`: its result's text is :data:`HUGE_TEXT`
  (several pipe buffers: the parent reads it in many pieces, some of them would block);
- a piece that starts with :data:`BREAK_DEVICE`: ``feed`` raises the error PyTorch raises
  once a kernel made an illegal memory access (the CUDA context is then broken for good);
- a piece that starts with :data:`REPORT_PLACEMENT`: its result's text is
  :func:`placement_report`, the device the engine was loaded on and the CUDA variables its
  process sees;
- the environment variable :data:`FAIL_LOAD_ENV` naming a file that exists when a worker
  starts: loading raises (restarts fail until the file is removed);
- the environment variable :data:`EXIT_LOAD_ENV`: the worker's process exits while loading,
  before it could say anything (what the OOM killer or a native library's abort does);
- the environment variable :data:`NO_FDS_ENV`: the worker leaves itself no free descriptor
  (``RLIMIT_NOFILE`` 3) while loading; ``model``: the loader then opens a file, as a
  real one opens its model's; ``slab``: it returns, and the worker's next open (mapping its
  slab) is the one refused.
"""

from __future__ import annotations

import gc
import os
import resource
import time
from collections.abc import Sequence
from dataclasses import replace
from multiprocessing.connection import Connection

import numpy as np
import numpy.typing as npt

from shared.messages import EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.checksum.engine import ChecksumEngine

FAIL_STEP = np.array([-32768, 32767, -32768, 1], dtype=np.int16)
CLOSE_RESULTS = np.array([-32768, 32767, -32768, 2], dtype=np.int16)
UNREADABLE = np.array([-32768, 32767, -32768, 3], dtype=np.int16)
CLOSE_COMMANDS = np.array([-32768, 32767, -32768, 4], dtype=np.int16)
HUGE_RESULT = np.array([-32768, 32767, -32768, 5], dtype=np.int16)
BREAK_DEVICE = np.array([-32768, 32767, -32768, 6], dtype=np.int16)
REPORT_PLACEMENT = np.array([-32768, 32767, -32768, 7], dtype=np.int16)
# PyTorch's text for cudaErrorIllegalAddress (c10/cuda/CUDAException.cpp's wording).
ILLEGAL_ADDRESS = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the"
    " stacktrace below might be incorrect."
)
# 600 KB of text that does not compress away in pickling: about ten 64 KiB pipe buffers.
HUGE_TEXT = "".join(f"{index:07d}" for index in range(600_000 // 7))
FAIL_OPEN = "fail-open"
FAIL_LOAD_ENV = "TEST_FAILING_ENGINE_FAIL_LOAD"
NO_FDS_ENV = "TEST_FAILING_ENGINE_NO_FDS"
EXIT_LOAD_ENV = "TEST_FAILING_ENGINE_EXIT_LOAD"


def marked(marker: npt.NDArray[np.int16], samples: int = 1000) -> npt.NDArray[np.int16]:
    """Audio that starts with ``marker``."""
    return np.concatenate([marker, np.ones(samples, dtype=np.int16)])


def _starts_with(samples: npt.NDArray[np.int16], marker: npt.NDArray[np.int16]) -> bool:
    return len(samples) >= len(marker) and bool(np.array_equal(samples[: len(marker)], marker))


def _refuse(text: str) -> str:
    raise RuntimeError(f"refusing to unpickle {text!r}")


class _Unreadable(str):
    """Text that pickles to a call of :func:`_refuse`."""

    __slots__ = ()

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return _refuse, (str(self),)


def placement_report(device: str) -> str:
    """``device|CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER``, as this process sees them
    (``-`` for a variable that is not set)."""
    return "|".join(
        [
            device,
            *(os.environ.get(name, "-") for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")),
        ]
    )


class FailingChecksumEngine(ChecksumEngine):
    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.device = device  # what it was loaded on, for REPORT_PLACEMENT

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        if FAIL_OPEN in options.hotwords:
            raise RuntimeError("asked to fail opening")
        super().open_stream(stream_id, options)

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        if any(_starts_with(item.samples, CLOSE_RESULTS) for item in items):
            for thing in gc.get_objects():
                # The worker's only writable Connection (shm transport) is its results pipe.
                if isinstance(thing, Connection) and not thing.closed and thing.writable:
                    thing.close()
            time.sleep(3600)
        if any(_starts_with(item.samples, CLOSE_COMMANDS) for item in items):
            for thing in gc.get_objects():
                # Its only readable Connection (shm transport) is its command pipe.
                if isinstance(thing, Connection) and not thing.closed and thing.readable:
                    thing.close()
        if any(_starts_with(item.samples, BREAK_DEVICE) for item in items):
            raise RuntimeError(ILLEGAL_ADDRESS)
        if any(_starts_with(item.samples, FAIL_STEP) for item in items):
            super().feed(items)  # half the work done: the state is then dropped all the same
            raise RuntimeError("asked to fail this step")
        outputs = super().feed(items)
        return [
            self._marked_output(item, output) for item, output in zip(items, outputs, strict=True)
        ]

    def _marked_output(self, item: ChunkItem, output: ChunkOutput) -> ChunkOutput:
        if _starts_with(item.samples, REPORT_PLACEMENT):
            text = placement_report(self.device)
            return replace(output, decoded=replace(output.decoded, text=text))
        return _marked_text(item, output)


def _marked_text(item: ChunkItem, output: ChunkOutput) -> ChunkOutput:
    if _starts_with(item.samples, UNREADABLE):
        return replace(output, decoded=replace(output.decoded, text=_Unreadable(output.text)))
    if _starts_with(item.samples, HUGE_RESULT):
        return replace(output, decoded=replace(output.decoded, text=HUGE_TEXT))
    return output


def load(spec: EngineSpec) -> FailingChecksumEngine:
    """The engine loader (module level: it is pickled by name into the workers)."""
    if os.environ.get(EXIT_LOAD_ENV):
        os._exit(3)
    fail_load = os.environ.get(FAIL_LOAD_ENV)
    if fail_load is not None and os.path.exists(fail_load):
        raise RuntimeError(f"asked to fail loading ({fail_load} exists)")
    no_fds = os.environ.get(NO_FDS_ENV)
    if no_fds is not None:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (3, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )
        if no_fds == "model":
            with open(__file__, "rb"):
                pass
    return FailingChecksumEngine(spec.device)
