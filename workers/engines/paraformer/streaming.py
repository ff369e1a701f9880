"""FunASR's streaming Paraformer, one cache per stream, kept in the worker.

funasr's streaming ``generate`` takes one stream per call ("batch_size must be set 1"), so
this engine walks the batch item by item. Each stream's cache (encoder k/v, decoder FSMN
state, frontend buffers; ~12.6 MB for the large model) lives here between chunks, which is
why the pool binds a stream to one worker for its whole life.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared.engines import EngineCapabilities
from shared.messages import Decoded, EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.runtime.funasr_quiet import quiet_funasr
from workers.engines.runtime.placement import use_torch_device
from workers.engines.table import TableEngine

INT16_SCALE = 32768.0


@dataclass(slots=True)
class _StreamState:
    options: StreamOptions
    cache: dict[str, Any] = field(default_factory=dict)


def load_automodel(model_dir: str, device: str, threads: int) -> Any:
    """``funasr.AutoModel`` on a local directory, with no hub access and explicit threads.

    A path that does not exist would be taken for a hub id (a slow, failing download), so
    it is checked first. AutoModel sets torch's thread count from ``ncpu`` on every call:
    passing it is the only way to make it stick.
    """
    path = Path(model_dir)
    if device.startswith("cuda"):
        import torch

        # funasr silently falls back to the CPU when CUDA is missing; we would rather say so.
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device} requested but CUDA is not available")
    use_torch_device(device)
    if not (path / "config.yaml").is_file():
        raise FileNotFoundError(f"{model_dir} is not a FunASR model directory (no config.yaml)")
    with quiet_funasr():
        from funasr import AutoModel

        model = AutoModel(
            model=str(path.resolve()),
            device=device,
            ncpu=threads,
            disable_update=True,
            disable_pbar=True,
            disable_log=True,
        )
    _release_freed_memory()
    return model


def _release_freed_memory() -> None:
    # funasr deep-copies the checkpoint while loading: resident memory peaks at ~3.1 GB for
    # the large model and only drops to ~1.35 GB once glibc returns the freed arenas.
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return
    libc = ctypes.CDLL(libc_name)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def to_float(samples: np.ndarray[Any, np.dtype[np.int16]]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """int16 PCM to the float32 in [-1, 1) that funasr's own byte loader produces."""
    return samples.astype(np.float32) / INT16_SCALE


class ParaformerStreamingEngine(TableEngine[_StreamState]):
    name = "paraformer"
    capabilities = EngineCapabilities(text_is_delta=True)

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._model = model

    @classmethod
    def load(cls, spec: EngineSpec) -> ParaformerStreamingEngine:
        if spec.model_dir is None:
            raise ValueError("the paraformer engine needs a model directory")
        return cls(load_automodel(spec.model_dir, spec.device, spec.threads))

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self.streams.open(stream_id, _StreamState(options))

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        return self.streams.step(items).each(self._decode)

    def _decode(self, state: _StreamState, item: ChunkItem) -> Decoded:
        options = state.options
        result = self._model.generate(
            input=to_float(item.samples),
            cache=state.cache,
            is_final=item.final,
            chunk_size=list(options.chunk_size),
            encoder_chunk_look_back=options.encoder_chunk_look_back,
            decoder_chunk_look_back=options.decoder_chunk_look_back,
            disable_pbar=True,
        )
        return Decoded(str(result[0]["text"]) if result else "")
