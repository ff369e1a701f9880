"""FunASR's offline (non-streaming) Paraformer: whole utterances, several in one call.

A stream's audio is buffered in the worker; its final piece triggers the decode. The
utterances whose final pieces are in the same engine step are decoded together, in one
``generate`` call per group of similar lengths: funasr pads a batch into one forward pass
(the worker's batch policy may hold a step open briefly so that more arrive together).
Results before the final one carry no text; the final one carries the whole utterance's,
punctuated by a CT-Transformer when the pool has one (``ASR_PUNC_MODEL``), as FunASR's
2pass server punctuates its offline pass.

A model that takes hotwords (SeACo-Paraformer) gets each stream's, from its OPEN, as
``generate(hotword=...)``; one call takes one hotword set, so only utterances with the same
words share a call. Any other model never sees them (funasr would ignore them too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared.audio import Samples
from shared.engines import EngineCapabilities, EngineName
from shared.messages import EngineSpec, SentenceStamp, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput, Timestamps
from workers.engines.itn import InverseNormalizer
from workers.engines.model_dir import gives_timestamps, supports_hotwords
from workers.engines.paraformer import load_automodel, to_float
from workers.engines.punctuation import Punctuator, load_punctuator
from workers.engines.sentences import stamp_sentences
from workers.engines.table import Answer, TableEngine, engine_error

Hotwords = tuple[str, ...]
Sentences = tuple[SentenceStamp, ...]
# A step's decodes: texts, timestamps, sentences and errors, each in the finals' order.
_Decoded = tuple[list[str], list["Timestamps"], list[Sentences], list[str | None]]

# SeACo keeps only the best-scoring 50 of more hotwords (funasr's nfilter=50, against the
# words plus its own <s>), scored on the first utterance of the call alone: in a shared call
# the others would be biased by words picked for another stream's audio. Utterances with
# this many words are decoded one per call.
HOTWORD_FILTER_WORDS = 50


def hotword_argument(words: Hotwords) -> str:
    """``words`` as funasr's ``hotword=`` string, which can only ever be taken as words.

    funasr's SeACo (``generate_hotwords_list``) reads a string that names an existing file
    ending in ".txt" from disk, and DOWNLOADS one that starts with "http"; only the rest is
    split into words. A client's words must never be fetched or read: the leading space
    defeats ``startswith("http")``, the trailing one ``endswith(".txt")``, and the words
    branch strips both before splitting.
    """
    return " " + " ".join(words) + " "


@dataclass(slots=True)
class _Utterance:
    hotwords: Hotwords = ()
    pieces: list[Samples] = field(default_factory=list)
    itn: bool = False  # its text inverse-normalized (StreamOptions.itn)


@dataclass(frozen=True, slots=True)
class _Final:
    """An utterance whose last piece has come: its answer's place, its audio and words."""

    index: int
    item: ChunkItem
    audio: Samples
    hotwords: Hotwords
    itn: bool = False


class ParaformerOfflineEngine(TableEngine[_Utterance]):
    name = EngineName.PARAFORMER_OFFLINE

    def __init__(
        self,
        model: Any,
        punctuator: Punctuator | None = None,
        takes_hotwords: bool = False,
        timestamps: bool = False,
    ) -> None:
        super().__init__()
        self._model = model
        self._punctuator = punctuator
        self._takes_hotwords = takes_hotwords
        self._itn = InverseNormalizer()
        # Results before the final one have no text: "" is the delta, and the final's
        # text is the whole utterance's either way.
        self.capabilities = EngineCapabilities(
            text_is_delta=True,
            decodes_at_final=True,
            timestamps=timestamps,
            hotwords=takes_hotwords,
        )

    @classmethod
    def load(cls, spec: EngineSpec) -> ParaformerOfflineEngine:
        if spec.model_dir is None:
            raise ValueError("the paraformer-offline engine needs a model directory")
        model = load_automodel(spec.model_dir, spec.device, spec.threads)
        punctuator = cls._load_punctuator(spec)
        model_dir = Path(spec.model_dir)
        return cls(model, punctuator, supports_hotwords(model_dir), gives_timestamps(model_dir))

    @staticmethod
    def _load_punctuator(spec: EngineSpec) -> Punctuator | None:
        """The pool's punctuator, or None (``paraformer-offline-onnx`` loads its own here
        too): under ONNX Runtime where the engine runs ONNX, else funasr's."""
        if spec.punc_model_dir is None:
            return None
        onnx = spec.engine is EngineName.PARAFORMER_OFFLINE_ONNX
        return load_punctuator(spec.punc_model_dir, spec.device, spec.threads, onnx, spec.precision)

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        hotwords = options.hotwords if self._takes_hotwords else ()
        self.streams.open(stream_id, _Utterance(hotwords, itn=options.itn))

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        step = self.streams.step(items)
        finals: list[_Final] = []
        for index, item, utterance in step.pending():
            utterance.pieces.append(item.samples)
            if not item.final:
                step.answer(index)
                continue
            audio = np.concatenate(utterance.pieces)
            finals.append(_Final(index, item, audio, utterance.hotwords, utterance.itn))
        decoded = zip(finals, *self._decode(finals), strict=True)
        for final, text, times, sentences, error in decoded:
            if error is not None:
                step.fail(final.item.stream_id, error)
            else:
                step.answer(final.index, Answer(text, times, sentences=sentences))
        return step.outputs()

    def _decode(
        self, finals: list[_Final]
    ) -> tuple[list[str], list[Timestamps], list[Sentences], list[str | None]]:
        """One ``generate`` call per hotword set and group of similar lengths; empty
        utterances have no text. Texts, timestamps (where the model predicts them), their
        sentences (split at the punctuation, before ITN), errors, in ``finals``' order.
        """
        texts = [""] * len(finals)
        times: list[Timestamps] = [()] * len(finals)
        errors: list[str | None] = [None] * len(finals)
        for group in _calls(finals):
            try:
                results = self._recognise([finals[i] for i in group])
            except Exception as exc:  # the call failed: so did every utterance in it
                for i in group:
                    errors[i] = engine_error(exc)
                continue
            for i, (text, stamps) in zip(group, results, strict=True):
                texts[i], times[i] = text, stamps
        if self._punctuator is not None:  # all of the step's texts in one call
            todo = [i for i, text in enumerate(texts) if text and errors[i] is None]
            done = self._punctuator.punctuate([texts[i] for i in todo])
            for i, punctuated in zip(todo, done, strict=True):
                texts[i], errors[i] = punctuated.text, punctuated.error
        # The sentences of the punctuated text the times belong to: before ITN rewrites it.
        sentences: list[Sentences] = [
            stamp_sentences(text, stamps) if stamps and errors[i] is None else ()
            for i, (text, stamps) in enumerate(zip(texts, times, strict=True))
        ]
        # After the punctuation, as FunASR's C++ server does it; only where asked.
        todo = [i for i, text in enumerate(texts) if text and errors[i] is None and finals[i].itn]
        if todo:
            normalized = self._itn.normalize([texts[i] for i in todo])
            for i, (text, error) in zip(todo, normalized, strict=True):
                texts[i], errors[i] = text, error
        return texts, times, sentences, errors

    def _recognise(self, finals: list[_Final]) -> list[tuple[str, Timestamps]]:
        """The text and token times of each of ``finals`` (one hotword set, similar
        lengths): one ``generate`` call. (``paraformer-offline-onnx`` runs its graph here,
        and shares everything else.)"""
        inputs = [to_float(final.audio) for final in finals]
        words = finals[0].hotwords
        hotword: dict[str, str | None] = {}
        if self._takes_hotwords:
            # None without words: funasr then skips the bias path. Said every time: funasr
            # 1.2 merged each call's options into AutoModel.kwargs for good, so the last
            # stream's words would bias the next (1.4.16 resets them per call).
            hotword["hotword"] = hotword_argument(words) if words else None
        results = self._model.generate(
            input=inputs, batch_size=len(inputs), disable_pbar=True, **hotword
        )
        return [
            (
                str(result.get("text", "")),
                tuple((int(s), int(e)) for s, e in result.get("timestamp", ())),
            )
            for result in results
        ]


LENGTH_RATIO = 1.25


def _calls(finals: list[_Final]) -> list[list[int]]:
    """The indices of ``finals`` that share each ``generate`` call.

    One call takes one hotword set, so each set is batched apart (utterances without words
    are one more set). A batch is padded to its longest utterance: mixing a 2 s clip with an
    8 s one costs more than decoding them apart (measured: bench/models/offline_batch.py), so within
    a set utterances are sorted by length and batched only with ones at most
    ``LENGTH_RATIO`` longer.
    """
    by_words: dict[Hotwords, list[int]] = {}
    for i, final in enumerate(finals):
        if len(final.audio):
            by_words.setdefault(final.hotwords, []).append(i)
    calls: list[list[int]] = []
    for words, indices in by_words.items():
        if len(words) >= HOTWORD_FILTER_WORDS:
            calls += [[i] for i in indices]
            continue
        indices.sort(key=lambda i: len(finals[i].audio))
        calls += similar_lengths(indices, lambda i: len(finals[i].audio))
    return calls


def similar_lengths(ordered: list[int], length: Callable[[int], int]) -> list[list[int]]:
    """Split indices sorted by length into runs whose longest is <= LENGTH_RATIO x shortest."""
    groups: list[list[int]] = []
    for index in ordered:
        if groups and length(index) <= LENGTH_RATIO * length(groups[-1][0]):
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups
