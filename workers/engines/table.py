"""Every engine's streams, kept one way: open, close, expire, and each step's answers.

An engine keeps its per-stream state (a decoder cache, an utterance's audio) in a
:class:`StreamTable` and writes only what it does with one stream's piece. The table does
the rest, alike for every engine:

- a piece of a stream the table does not hold (expired, closed, failed) is answered with an
  error at once;
- every piece fed marks its stream fed: idle expiry counts from the last one;
- a stream that fails in a step loses its state, and each of its pieces in that step not
  answered yet is answered with the error (so every piece is answered exactly once);
- a stream whose final piece is answered loses its state then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from shared.messages import NOTHING, Decoded
from workers.engines.base import ChunkItem, ChunkOutput

StateT = TypeVar("StateT")


def engine_error(exc: Exception) -> str:
    """The error that fails a stream whose step raised ``exc``."""
    return f"engine error: {type(exc).__name__}: {exc}"


@dataclass(slots=True)
class _Entry(Generic[StateT]):
    state: StateT
    last_fed: float


class StreamTable(Generic[StateT]):
    """The streams an engine holds, by id, each with its state."""

    def __init__(self) -> None:
        self._entries: dict[int, _Entry[StateT]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, stream_id: object) -> bool:
        return stream_id in self._entries

    def open(self, stream_id: int, state: StateT) -> None:
        self._entries[stream_id] = _Entry(state, time.monotonic())

    def close(self, stream_id: int) -> None:
        """Drop the stream's state if it is still held."""
        self._entries.pop(stream_id, None)

    def expire_idle(self, now: float, idle_timeout_s: float) -> list[int]:
        """Drop the streams not fed for ``idle_timeout_s``; return their ids."""
        expired = [
            stream_id
            for stream_id, entry in self._entries.items()
            if now - entry.last_fed > idle_timeout_s
        ]
        for stream_id in expired:
            del self._entries[stream_id]
        return expired

    def step(self, items: Sequence[ChunkItem]) -> Step[StateT]:
        """Begin one ``feed`` of ``items``."""
        return Step(self._entries, items)


class Step(Generic[StateT]):
    """One ``feed``: its items, each one's stream state, and one answer per item.

    Per-piece engines call :meth:`each`. Batched engines walk :meth:`pending`, call
    :meth:`answer` or :meth:`fail` as their calls complete, and return :meth:`outputs`.
    """

    def __init__(self, entries: dict[int, _Entry[StateT]], items: Sequence[ChunkItem]) -> None:
        self.items = items
        self._entries = entries
        self._outputs: list[ChunkOutput | None] = [None] * len(items)
        now = time.monotonic()
        for index, item in enumerate(items):
            entry = entries.get(item.stream_id)
            if entry is None:
                self._outputs[index] = _unknown_stream_output(item)
            else:
                entry.last_fed = now

    def pending(self) -> Iterator[tuple[int, ChunkItem, StateT]]:
        """The items not answered yet, in order, each with its stream's state."""
        for index, item in enumerate(self.items):
            entry = self._entries.get(item.stream_id)
            if self._outputs[index] is None and entry is not None:
                yield index, item, entry.state

    def answer(self, index: int, decoded: Decoded = NOTHING) -> None:
        """Answer item ``index`` with what the engine decoded of it (the table adds whose
        it is); a final item's stream is dropped."""
        item = self.items[index]
        self._outputs[index] = ChunkOutput(item.stream_id, item.seq, item.final, decoded)
        if item.final:
            self._entries.pop(item.stream_id, None)

    def fail(self, stream_id: int, error: str) -> None:
        """The stream is lost: drop its state, answer its unanswered items with ``error``."""
        self._entries.pop(stream_id, None)
        for index, item in enumerate(self.items):
            if item.stream_id == stream_id and self._outputs[index] is None:
                self._outputs[index] = ChunkOutput(stream_id, item.seq, True, error=error)

    def outputs(self) -> list[ChunkOutput]:
        """Every item's answer, in order."""
        outputs = [output for output in self._outputs if output is not None]
        if len(outputs) != len(self._outputs):
            raise RuntimeError(f"{len(self._outputs) - len(outputs)} pieces were not answered")
        return outputs

    def each(self, decode: Callable[[StateT, ChunkItem], Decoded]) -> list[ChunkOutput]:
        """Answer every item with ``decode`` of its stream's state, one item per call; an
        exception fails that stream only."""
        for index, item, state in self.pending():
            try:
                answer = decode(state, item)
            except Exception as exc:
                self.fail(item.stream_id, engine_error(exc))
            else:
                self.answer(index, answer)
        return self.outputs()


def _unknown_stream_output(item: ChunkItem) -> ChunkOutput:
    return ChunkOutput(
        item.stream_id,
        item.seq,
        True,
        error=f"stream {item.stream_id} is not open in this worker (expired or closed)",
    )


class TableEngine(Generic[StateT]):
    """The part of an engine that is its stream table: closing, expiring, counting."""

    def __init__(self) -> None:
        self.streams: StreamTable[StateT] = StreamTable()

    @property
    def active_streams(self) -> int:
        return len(self.streams)

    def close_stream(self, stream_id: int) -> None:
        self.streams.close(stream_id)

    def expire_idle(self, now: float, idle_timeout_s: float) -> list[int]:
        return self.streams.expire_idle(now, idle_timeout_s)
