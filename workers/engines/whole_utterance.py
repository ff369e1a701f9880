"""What the whole-utterance engines share (``paraformer_offline``, ``sensevoice`` and their
ONNX runtimes): a stream's pieces buffered until its final one, and a step's finals grouped
into calls.

Every piece before a stream's final one is answered at once with no text ("" is the delta
of a ``text_is_delta`` engine); the final one carries the decode of the utterance's whole
audio. The finals of one step are decoded together, one call per group: the utterances that
share what a call takes once (a hotword set; a language and an ITN choice), of similar
lengths.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from shared.audio import Samples
from shared.messages import StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.table import Step, TableEngine

KeyT = TypeVar("KeyT", bound=Hashable)

LENGTH_RATIO = 1.25


@dataclass(slots=True)
class Utterance:
    options: StreamOptions  # as the engine takes them (``WholeUtteranceEngine._taken``)
    pieces: list[Samples] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Final:
    """An utterance whose last piece has come: its answer's place, its audio and options."""

    index: int
    item: ChunkItem
    audio: Samples
    options: StreamOptions


class WholeUtteranceEngine(TableEngine[Utterance]):
    """An engine that decodes each utterance whole, at its final piece: the buffering is
    here; :meth:`_answer_finals` decodes a step's finals and answers them."""

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self.streams.open(stream_id, Utterance(self._taken(options)))

    def _taken(self, options: StreamOptions) -> StreamOptions:
        """What of the OPEN's options the engine keeps for the utterance's decode."""
        return options

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        step = self.streams.step(items)
        finals: list[Final] = []
        for index, item, utterance in step.pending():
            utterance.pieces.append(item.samples)
            if not item.final:
                step.answer(index)
                continue
            audio = np.concatenate(utterance.pieces)
            finals.append(Final(index, item, audio, utterance.options))
        self._answer_finals(step, finals)
        return step.outputs()

    def _answer_finals(self, step: Step[Utterance], finals: list[Final]) -> None:
        """Decode ``finals`` and answer (or fail) each in ``step``."""
        raise NotImplementedError


def calls(
    finals: Sequence[Final],
    key: Callable[[StreamOptions], KeyT],
    alone: Callable[[KeyT], bool] | None = None,
) -> list[list[int]]:
    """The indices of ``finals`` that share each call; empty utterances are in none.

    One call takes one ``key`` of the options, so each key is batched apart (``alone``
    keys: one utterance per call). A batch is padded to its longest utterance: mixing a 2 s
    clip with an 8 s one costs more than decoding them apart (BENCHMARKS.md, "The offline
    Paraformer: batching whole utterances"), so within a key utterances are sorted by length and
    batched only with ones at most ``LENGTH_RATIO`` longer.
    """
    by_key: dict[KeyT, list[int]] = {}
    for i, final in enumerate(finals):
        if len(final.audio):
            by_key.setdefault(key(final.options), []).append(i)
    groups: list[list[int]] = []
    for shared, indices in by_key.items():
        if alone is not None and alone(shared):
            groups += [[i] for i in indices]
            continue
        indices.sort(key=lambda i: len(finals[i].audio))
        groups += similar_lengths(indices, lambda i: len(finals[i].audio))
    return groups


def similar_lengths(ordered: list[int], length: Callable[[int], int]) -> list[list[int]]:
    """Split indices sorted by length into runs whose longest is <= LENGTH_RATIO x shortest."""
    groups: list[list[int]] = []
    for index in ordered:
        if groups and length(index) <= LENGTH_RATIO * length(groups[-1][0]):
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups
