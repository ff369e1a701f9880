"""An ONNX Runtime session as the ONNX engines run them, on the device they were given, or
none at all.

A session asked for a GPU serves on it or is refused in one line. ``onnxruntime-gpu``
lists ``CUDAExecutionProvider`` as available whether or not its CUDA libraries load
(libcudnn, libcublasLt: pip-only images keep them under ``site-packages/nvidia/*/lib``, where
only ``onnxruntime.preload_dlls`` or an earlier ``import torch`` finds them); where they do
not, onnxruntime builds the session on the CPU and says so only in its log. So the libraries
are preloaded the way onnxruntime documents, and the session's own providers are checked,
not the list of available ones.

On CUDA, the options suit our shapes, which change at every call (a step's streams, a
chunk's tokens, an utterance's frames):

- ``cudnn_conv_algo_search=HEURISTIC``: the default, ``EXHAUSTIVE``, benchmarks every
  convolution algorithm on each new input shape (the FSMN blocks' depthwise convolutions
  meet a new one most steps);
- ``arena_extend_strategy=kSameAsRequested``: the default doubles the arena at each
  extension and never gives it back;
- ``use_tf32=0``: TF32 matmuls change the text, and fp32 on the GPU is promised equal to
  PyTorch's on the CPU.

On a CPU, a graph given as a file is opened through its mapped copy
(``workers.engines.runtime.mapped_copy``): its weights, prepacked, mapped from one file that
every worker of the model shares, unless the worker was started with ``mapped_weights`` off
(``ASR_ONNX_MAPPED_WEIGHTS=0``; the worker says so with :func:`use_mapped_weights`).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.metadata
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workers.engines.runtime.mapped_copy import mapped_copy
from workers.engines.runtime.placement import record_provider

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
CUDA_OPTIONS = {
    "cudnn_conv_algo_search": "HEURISTIC",
    "arena_extend_strategy": "kSameAsRequested",
    "use_tf32": "0",
}
CUDA_PROVIDER_LIBRARY = "libonnxruntime_providers_cuda.so"

_mapped_weights = True  # this process's: ASR_ONNX_MAPPED_WEIGHTS, as its EngineSpec said


def use_mapped_weights(mapped: bool) -> None:
    """Whether this worker's CPU sessions open their graphs' mapped copies (the worker
    says so once, from its ``EngineSpec``, before its engine loads)."""
    global _mapped_weights
    _mapped_weights = mapped


@contextlib.contextmanager
def own_weights() -> Iterator[None]:
    """Sessions opened in the block hold their own weights: an export's passing sessions
    (its int8 calibration) would otherwise leave mapped copies of graphs no worker opens."""
    global _mapped_weights
    previous, _mapped_weights = _mapped_weights, False
    try:
        yield
    finally:
        _mapped_weights = previous


class GpuUnavailable(RuntimeError):
    """A worker asked for a GPU that onnxruntime cannot run on: it refuses to start."""


def open_session(model: Path | bytes, device: str, threads: int) -> Any:
    """An onnxruntime session on ``model`` (a file, or a serialized graph): ``threads``
    intra-op threads, no CPU arena, on ``device`` (``cpu`` or ``cuda:N``, as the worker
    sees it). Raises :class:`GpuUnavailable` where a CUDA device was asked for and the
    session would not run on it. onnxruntime is imported here, not at this module's import.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeError(NOT_INSTALLED) from None

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors still reach stderr: a provider that failed
    # The arena keeps a second copy of the initializers' memory (measured on the streaming
    # model: 1.2 against 0.9 GB for the large fp32 model), at the same speed.
    options.enable_cpu_mem_arena = False
    source = str(model) if isinstance(model, Path) else model
    if not device.startswith("cuda"):
        if isinstance(model, Path) and _mapped_weights:
            source = str(mapped_copy(model))
        session = ort.InferenceSession(source, options, providers=[CPU])
        record_provider(CPU)
        return session
    if CUDA not in ort.get_available_providers():
        raise GpuUnavailable(no_cuda_provider(device))
    if hasattr(ort, "preload_dlls"):  # onnxruntime >= 1.21
        ort.preload_dlls()
    device_id = int(device.partition(":")[2] or 0)
    requested = [(CUDA, {"device_id": str(device_id), **CUDA_OPTIONS}), CPU]
    session = ort.InferenceSession(source, options, providers=requested)
    check_providers(device, session.get_providers(), ort.__version__)
    record_provider(CUDA)
    return session


NOT_INSTALLED = (
    "onnxruntime is not installed: pip install 'asr-gateway[cpu]' (or [gpu], where workers"
    " run on GPUs)"
)


def missing_runtime(devices: tuple[str, ...]) -> str | None:
    """Why ONNX Runtime cannot serve on ``devices`` as installed (not at all, or not on
    their GPU), asked without importing it; ``None`` where it can. The pool asks before an
    export that would be made in vain."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return NOT_INSTALLED
    gpus = [device for device in devices if device.startswith("cuda")]
    if gpus and not any(
        (Path(location) / "capi" / CUDA_PROVIDER_LIBRARY).is_file()
        for location in spec.submodule_search_locations
    ):
        return no_cuda_provider(gpus[0])
    return None


def no_cuda_provider(device: str) -> str:
    """The one line that refuses ``device`` to an onnxruntime without a CUDA provider."""
    return (
        f"{device} requested, but {_distribution()} has no {CUDA}: pip install"
        " 'asr-gateway[gpu]' (onnxruntime-gpu) in place of [cpu]"
    )


def check_providers(device: str, in_use: list[str], version: str) -> None:
    """Refuse a session built for ``device`` whose providers (``session.get_providers()``,
    in priority order) do not put CUDA first: it would run on the CPU, quietly."""
    if in_use and in_use[0] == CUDA:
        return
    raise GpuUnavailable(
        f"{device} requested, but onnxruntime {version} built the session on"
        f" {', '.join(in_use) or 'no provider'}: {CUDA} did not load ({cuda_load_error()})"
    )


def cuda_load_error() -> str:
    """Why onnxruntime's CUDA provider library does not load here, as the dynamic loader
    says it (the missing library by name), or where to look when it does load."""
    import onnxruntime as ort

    library = Path(ort.__file__).parent / "capi" / CUDA_PROVIDER_LIBRARY
    if not library.is_file():
        return f"{library.name} is not installed: this onnxruntime is not onnxruntime-gpu"
    try:
        ctypes.CDLL(str(library))
    except OSError as exc:
        return str(exc)
    return f"{library.name} loads; onnxruntime's error above says what failed"


def _distribution() -> str:
    """Which package put ``onnxruntime`` here: PyPI's CPU build or the GPU one."""
    for name in ("onnxruntime-gpu", "onnxruntime"):
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "onnxruntime (of no installed distribution)"
