"""FunASR's streaming FSMN-VAD: where speech starts and ends, for 2pass sentence ends.

Each stream keeps funasr's own VAD cache; each piece is run through
``AutoModel.generate(..., cache=..., chunk_size=...)`` exactly as FunASR's 2pass server
does. A result's text is the JSON of funasr's segment list for that piece, in ms from the
stream's start: ``[[beg, -1]]`` speech started, ``[[-1, end]]`` it ended, ``[[beg, end]]``
both, ``[]`` nothing new (``gateway/vad.py`` reads it).

The end-of-sentence silence is the model's ``max_end_silence_time`` (800 ms in fsmn-vad's
config), passed explicitly: without it funasr 1.4 switches to a schedule of its own that
waits up to 2 s in a sentence's first 10 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.messages import EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput, expire_idle_streams, unknown_stream_output
from workers.engines.paraformer import load_automodel, to_float

STRIDE_MS = 60  # funasr's VAD steps through a piece in strides of this; the rest waits


@dataclass(slots=True)
class _VadStream:
    cache: dict[str, Any] = field(default_factory=dict)
    last_fed: float = 0.0


class FsmnVadEngine:
    name = "fsmn-vad"

    def __init__(self, model: Any) -> None:
        self._model = model
        self._end_silence_ms = int(model.model.vad_opts.max_end_silence_time)
        self._streams: dict[int, _VadStream] = {}

    @classmethod
    def load(cls, spec: EngineSpec) -> FsmnVadEngine:
        if spec.model_dir is None:
            raise ValueError("the fsmn-vad engine needs a model directory")
        return cls(load_automodel(spec.model_dir, spec.device, spec.threads))

    @property
    def active_streams(self) -> int:
        return len(self._streams)

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self._streams[stream_id] = _VadStream(last_fed=time.monotonic())

    def close_stream(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)

    def expire_idle(self, now: float, idle_timeout_s: float) -> list[int]:
        return expire_idle_streams(self._streams, now, idle_timeout_s)

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        # funasr's streaming VAD takes one stream per call: the batch is walked.
        outputs: list[ChunkOutput] = []
        for item in items:
            stream = self._streams.get(item.stream_id)
            if stream is None:
                outputs.append(unknown_stream_output(item))
                continue
            stream.last_fed = time.monotonic()
            if item.final:
                del self._streams[item.stream_id]
            try:
                segments = self._segments(stream, item)
            except Exception as exc:
                self._streams.pop(item.stream_id, None)
                error = f"engine error: {type(exc).__name__}: {exc}"
                outputs.append(ChunkOutput(item.stream_id, item.seq, "", True, error=error))
                continue
            outputs.append(ChunkOutput(item.stream_id, item.seq, json.dumps(segments), item.final))
        return outputs

    def _segments(self, stream: _VadStream, item: ChunkItem) -> list[list[int]]:
        if not len(item.samples) and not item.final:
            return []
        result = self._model.generate(
            input=to_float(item.samples),
            cache=stream.cache,
            is_final=item.final,
            chunk_size=STRIDE_MS,
            max_end_silence_time=self._end_silence_ms,
            disable_pbar=True,
        )
        return [[int(beg), int(end)] for beg, end in result[0]["value"]] if result else []
