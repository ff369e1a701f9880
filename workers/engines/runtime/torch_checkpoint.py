"""A ``torch.save`` state dict as numpy arrays, read without importing torch.

The ``fsmn-vad-onnx`` worker runs without torch (importing it costs ~470 MB of resident
memory per worker, for a 1.7 MB model). torch's own format since 1.6 is a zip archive:
``<name>/data.pkl``, a pickle whose tensors refer to raw little-endian storages
``<name>/data/<key>``. This reads it with an unpickler that knows tensors and ordered dicts
and nothing else: no code from the file runs. A file in torch's legacy (pre-zip) format is
refused with a message, rather than read by importing torch after all.
"""

from __future__ import annotations

import collections
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

_STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


@dataclass(frozen=True, slots=True)
class _StorageType:
    dtype: type[np.generic]


def _rebuild_tensor(
    storage: npt.NDArray[Any],
    storage_offset: int,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    *_: Any,
) -> npt.NDArray[Any]:
    """``torch._utils._rebuild_tensor_v2``: a strided view of the storage, copied."""
    itemsize = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        storage[storage_offset:], shape=size, strides=[s * itemsize for s in stride]
    )
    return np.array(view, copy=True)


def _rebuild_parameter(data: npt.NDArray[Any], *_: Any) -> npt.NDArray[Any]:
    return data


class _TensorUnpickler(pickle.Unpickler):
    _ALLOWED: dict[tuple[str, str], Any] = {  # noqa: RUF012 (read-only)
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    }

    def __init__(self, file: IO[bytes], archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(file)
        self._archive = archive
        self._prefix = prefix

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(_STORAGE_DTYPES[name])
        found = self._ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a state dict")
        return found

    def persistent_load(self, pid: Any) -> Any:
        kind, storage_type, key, _location, numel = pid
        if kind != "storage" or not isinstance(storage_type, _StorageType):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        raw = self._archive.read(f"{self._prefix}data/{key}")
        return np.frombuffer(raw, dtype=storage_type.dtype, count=int(numel))


def load_state_dict(path: Path) -> dict[str, npt.NDArray[Any]]:
    """The tensors of a ``torch.save``d state dict (or of a dict holding one, under
    ``state_dict`` / ``model_state_dict`` / ``model``, as funasr's loader unwraps)."""
    if not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path} is in torch's legacy format; re-save it with a torch of 1.6 or later"
            " (torch.save(torch.load(path), path))"
        )
    with zipfile.ZipFile(path) as archive:
        pickles = [name for name in archive.namelist() if name.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise ValueError(f"{path} is not a torch checkpoint (no single data.pkl)")
        prefix = pickles[0][: -len("data.pkl")]
        byteorder = f"{prefix}byteorder"
        if byteorder in archive.namelist() and archive.read(byteorder) != b"little":
            raise ValueError(f"{path} was saved big-endian")
        with archive.open(pickles[0]) as handle:
            state: Any = _TensorUnpickler(handle, archive, prefix).load()
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, dict) and key in state:
            state = state[key]
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds no state dict")
    return {str(k): v for k, v in state.items() if isinstance(v, np.ndarray)}
