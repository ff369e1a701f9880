"""The engine interface: open a stream, feed a batch of chunks, close.

Batch-shaped from the start (design.md): the worker hands the engine every chunk that is
waiting, and the engine returns one result per chunk, in order. An engine that can only take
one stream per call walks the batch; a batched engine runs it in one forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from shared.messages import StreamOptions

Samples = npt.NDArray[np.int16]


@dataclass(frozen=True, slots=True)
class ChunkItem:
    """Samples of one stream; ``final`` marks the last piece of the stream."""

    stream_id: int
    seq: int
    samples: Samples
    final: bool


@dataclass(frozen=True, slots=True)
class ChunkOutput:
    """The engine's answer to one :class:`ChunkItem`; ``error`` fails just that stream."""

    stream_id: int
    seq: int
    text: str
    final: bool
    error: str | None = None
    timestamps: tuple[tuple[int, int], ...] = ()  # see StreamResult.timestamps


class Engine(Protocol):
    name: str

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


def unknown_stream_output(item: ChunkItem) -> ChunkOutput:
    """The answer to audio for a stream the engine does not hold (expired or closed)."""
    return ChunkOutput(
        item.stream_id,
        item.seq,
        "",
        True,
        error=f"stream {item.stream_id} is not open in this worker (expired or closed)",
    )


class _HasLastFed(Protocol):
    last_fed: float


StateT = TypeVar("StateT", bound=_HasLastFed)


def expire_idle_streams(streams: dict[int, StateT], now: float, idle_timeout_s: float) -> list[int]:
    """Drop the streams of ``streams`` not fed for ``idle_timeout_s``; return their ids."""
    expired = [sid for sid, state in streams.items() if now - state.last_fed > idle_timeout_s]
    for stream_id in expired:
        del streams[stream_id]
    return expired
