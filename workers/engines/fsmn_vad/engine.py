"""FunASR's streaming FSMN-VAD: where speech starts and ends, for 2pass sentence ends.

Each stream keeps funasr's own VAD cache; each piece is run through
``AutoModel.generate(..., cache=..., chunk_size=...)`` exactly as FunASR's 2pass server
does. A result's ``segments`` are funasr's segment list for that piece, in ms from the
stream's start: ``((beg, -1),)`` speech started, ``((-1, end),)`` it ended, ``((beg, end),)``
both, ``()`` nothing new (``gateway/whole/vad.py`` reads them); its text is empty.

The end-of-sentence silence is the model's ``max_end_silence_time`` (800 ms in fsmn-vad's
config), passed explicitly: without it funasr 1.4 switches to a schedule of its own that
waits up to 2 s in a sentence's first 10 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.engines import EngineCapabilities
from shared.messages import NOTHING, Decoded, EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.table import TableEngine

STRIDE_MS = 60  # funasr's VAD steps through a piece in strides of this; the rest waits


@dataclass(slots=True)
class _VadStream:
    cache: dict[str, Any] = field(default_factory=dict)


class FsmnVadEngine(TableEngine[_VadStream]):
    name = "fsmn-vad"
    # Each piece's segments are new ones (its text is empty).
    capabilities = EngineCapabilities(text_is_delta=True)

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._model = model
        self._end_silence_ms = int(model.model.vad_opts.max_end_silence_time)

    @classmethod
    def load(cls, spec: EngineSpec) -> FsmnVadEngine:
        if spec.model_dir is None:
            raise ValueError("the fsmn-vad engine needs a model directory")
        return cls(load_automodel(spec.model_dir, spec.device, spec.threads))

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self.streams.open(stream_id, _VadStream())

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        # funasr's streaming VAD takes one stream per call: the batch is walked.
        return self.streams.step(items).each(self._segments)

    def _segments(self, stream: _VadStream, item: ChunkItem) -> Decoded:
        if not len(item.samples) and not item.final:
            return NOTHING
        result = self._model.generate(
            input=to_float(item.samples),
            cache=stream.cache,
            is_final=item.final,
            chunk_size=STRIDE_MS,
            max_end_silence_time=self._end_silence_ms,
            disable_pbar=True,
        )
        segments = tuple((int(beg), int(end)) for beg, end in result[0]["value"]) if result else ()
        return Decoded(segments=segments)
