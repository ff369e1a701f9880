"""FunASR's offline (non-streaming) Paraformer: whole utterances, several in one call.

A stream's audio is buffered in the worker; its final piece triggers the decode. The
utterances whose final pieces are in the same engine step are decoded together, in one
``generate`` call per group of similar lengths (``workers.engines.whole_utterance``):
funasr pads a batch into one forward pass (the worker's batch policy may hold a step open
briefly so that more arrive together).
Results before the final one carry no text; the final one carries the whole utterance's,
punctuated by a CT-Transformer when the pool has one (``ASR_PUNC_MODEL``), as FunASR's
2pass server punctuates its offline pass.

A model that takes hotwords (SeACo-Paraformer) gets each stream's, from its OPEN, as
``generate(hotword=...)``; one call takes one hotword set, so only utterances with the same
words share a call. Any other model never sees them (funasr would ignore them too).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from shared.engines import EngineCapabilities
from shared.messages import Decoded, EngineSpec, SentenceStamp, StreamOptions
from workers.engines.base import Timestamps
from workers.engines.itn import InverseNormalizer
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.punctuation.ct_transformer import Punctuator, load_punctuator
from workers.engines.runtime.model_dir import gives_timestamps, supports_hotwords
from workers.engines.sentences import stamp_sentences
from workers.engines.table import Step, engine_error
from workers.engines.whole_utterance import Final, Utterance, WholeUtteranceEngine, calls

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


class ParaformerOfflineEngine(WholeUtteranceEngine):
    name = "paraformer-offline"

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
        onnx = spec.engine == "paraformer-offline-onnx"
        return load_punctuator(spec.punc_model_dir, spec.device, spec.threads, onnx, spec.precision)

    def _taken(self, options: StreamOptions) -> StreamOptions:
        return options if self._takes_hotwords else replace(options, hotwords=())

    def _answer_finals(self, step: Step[Utterance], finals: list[Final]) -> None:
        decoded = zip(finals, *self._decode(finals), strict=True)
        for final, text, times, sentences, error in decoded:
            if error is not None:
                step.fail(final.item.stream_id, error)
            else:
                step.answer(final.index, Decoded(text, times, sentences=sentences))

    def _decode(
        self, finals: list[Final]
    ) -> tuple[list[str], list[Timestamps], list[Sentences], list[str | None]]:
        """One ``generate`` call per hotword set and group of similar lengths; empty
        utterances have no text. Texts, timestamps (where the model predicts them), their
        sentences (split at the punctuation, before ITN), errors, in ``finals``' order.
        """
        texts = [""] * len(finals)
        times: list[Timestamps] = [()] * len(finals)
        errors: list[str | None] = [None] * len(finals)
        by_words = calls(finals, _hotwords, alone=lambda words: len(words) >= HOTWORD_FILTER_WORDS)
        for group in by_words:
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
        todo = [
            i
            for i, text in enumerate(texts)
            if text and errors[i] is None and finals[i].options.itn
        ]
        if todo:
            normalized = self._itn.normalize([texts[i] for i in todo])
            for i, (text, error) in zip(todo, normalized, strict=True):
                texts[i], errors[i] = text, error
        return texts, times, sentences, errors

    def _recognise(self, finals: list[Final]) -> list[tuple[str, Timestamps]]:
        """The text and token times of each of ``finals`` (one hotword set, similar
        lengths): one ``generate`` call. (``paraformer-offline-onnx`` runs its graph here,
        and shares everything else.)"""
        inputs = [to_float(final.audio) for final in finals]
        words = finals[0].options.hotwords
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


def _hotwords(options: StreamOptions) -> Hotwords:
    return options.hotwords
