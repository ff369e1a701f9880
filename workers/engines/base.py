"""The engine interface: open a stream, feed a batch of chunks, close.

Batch-shaped from the start (docs/architecture.md): the worker hands the engine every chunk that is
waiting, and the engine returns one result per chunk, in order. An engine that can only take
one stream per call walks the batch; a batched engine runs it in one forward pass. What
every engine does alike with its streams (open, close, expire, unknown or failed streams)
is :class:`workers.engines.table.StreamTable`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from shared.audio import Samples
from shared.engines import EngineCapabilities, EngineName
from shared.messages import NOTHING, Decoded, StreamOptions

Timestamps = tuple[tuple[int, int], ...]  # see StreamResult.timestamps
Segments = tuple[tuple[int, int], ...]  # see StreamResult.segments


@dataclass(frozen=True, slots=True)
class ChunkItem:
    """Samples of one stream; ``final`` marks the last piece of the stream."""

    stream_id: int
    seq: int
    samples: Samples
    final: bool


@dataclass(frozen=True, slots=True)
class ChunkOutput:
    """The engine's answer to one :class:`ChunkItem`: what it decoded (``shared.messages
    .Decoded``, carried whole to the wire), or an ``error`` that fails just that stream."""

    stream_id: int
    seq: int
    final: bool
    decoded: Decoded = NOTHING
    error: str | None = None

    @property
    def text(self) -> str:
        return self.decoded.text


class Engine(Protocol):
    name: EngineName
    capabilities: EngineCapabilities

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        """Create the stream's state. Stream ids are never reused within a worker."""

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        """Process chunks in order (a stream may appear more than once). A final item
        flushes the stream, answers with its final text, and frees the stream's state."""

    def close_stream(self, stream_id: int) -> None:
        """Drop the stream's state if it still exists (an abandoned stream)."""

    def expire_idle(self, now: float, idle_timeout_s: float) -> list[int]:
        """Drop streams not fed for ``idle_timeout_s``; return their ids."""

    @property
    def active_streams(self) -> int: ...
