"""The GPU memory a worker holds, as the worker itself can tell it, in a container too.

``nvidia-smi``'s per-process figures name host PIDs, which a gateway in a container (its
own PID namespace) cannot match to its workers; so each worker counts its own. No runtime
says what a process holds on a GPU (ONNX Runtime has no API for its CUDA arena; PyTorch's
allocator knows its own blocks but not the context), so a worker measures the device's
used memory (NVML, which creates no CUDA context) before and after it loads its engine
and warms it up, under a lock that the other workers on the same GPU take for their own
loads: the difference is its context, its weights and its warm-up's buffers. Afterwards,
a PyTorch worker adds what its caching allocator has grown by since; an ONNX Runtime
arena's later growth is not seen (hence ``arena_extend_strategy=kSameAsRequested`` and the
warm-up, ``workers.engines.runtime.onnx_session``).

Another process loading on the same GPU at the same moment (not one of ours) would be
counted in; the figure is the worker's own, never another's total.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from workers.ipc.devices import VISIBLE

T = TypeVar("T")
UsedBytes = Callable[[str], int | None]  # a GPU's used memory, by its NVML index or UUID
NVML_LIBRARY = "libnvidia-ml.so.1"


class _NvmlMemory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def nvml_used_bytes(gpu: str) -> int | None:
    """The used memory of ``gpu`` (an index as ``nvidia-smi`` counts, or a ``GPU-`` UUID),
    from the NVIDIA driver's management library; ``None`` where it cannot be asked (no
    driver, a MIG instance)."""
    try:
        nvml = ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        handle = ctypes.c_void_p()
        if gpu.isdigit():
            status = nvml.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(int(gpu)), ctypes.byref(handle)
            )
        elif gpu.startswith("GPU-"):
            status = nvml.nvmlDeviceGetHandleByUUID(gpu.encode(), ctypes.byref(handle))
        else:
            return None
        memory = _NvmlMemory()
        if status != 0 or nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
            return None
        return int(memory.used)
    finally:
        nvml.nvmlShutdown()


@contextmanager
def _exclusive(gpu: str) -> Iterator[None]:
    """Hold the lock of ``gpu`` that every worker loading on it takes (released by the
    kernel if the holder dies)."""
    name = "".join(c if c.isalnum() or c == "-" else "_" for c in gpu)
    path = Path(tempfile.gettempdir()) / f"asr-gateway-gpu-{name}.lock"
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class GpuMemoryMeter:
    """A worker's GPU memory: what its load took, and what PyTorch's allocator added since."""

    def __init__(self, gpu: str | None, used_bytes: UsedBytes = nvml_used_bytes) -> None:
        self._gpu = gpu  # None: a CPU worker
        self._used_bytes = used_bytes
        self.at_load: int | None = None
        self._torch_reserved_at_load = 0

    @classmethod
    def for_this_worker(cls) -> GpuMemoryMeter:
        """The meter of the GPU this process was spawned to see (``CUDA_VISIBLE_DEVICES``
        naming one: ``workers.ipc.devices``); a meter that measures nothing on the CPU."""
        visible = os.environ.get(VISIBLE, "")
        return cls(visible if visible and "," not in visible else None)

    def measure_load(self, load: Callable[[], T]) -> T:
        """``load()``, with the device's used memory before and after it, under the GPU's
        lock: ``at_load`` is the difference (``None`` where it could not be read)."""
        if self._gpu is None:
            return load()
        with _exclusive(self._gpu):
            before = self._used_bytes(self._gpu)
            loaded = load()
            after = self._used_bytes(self._gpu)
        if before is not None and after is not None:
            self.at_load = max(0, after - before)
            self._torch_reserved_at_load = _torch_reserved()
        return loaded

    def now(self) -> int | None:
        """The worker's GPU memory now: its load's, and its PyTorch allocator's growth."""
        if self.at_load is None:
            return None
        return self.at_load + max(0, _torch_reserved() - self._torch_reserved_at_load)


def _torch_reserved() -> int:
    """What PyTorch's caching allocator holds in this process (0 where torch never used
    CUDA here: it is not imported just to ask)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return 0
    return int(torch.cuda.memory_reserved())
