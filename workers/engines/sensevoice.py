"""SenseVoiceSmall: whole utterances in zh, en, yue, ja and ko, tagged with what it heard.

Like the offline Paraformer (``workers.engines.paraformer_offline``), a stream's audio is
buffered in the worker and decoded when its final piece comes, and the utterances whose
finals are in the same step are decoded together: one ``generate`` call per group of similar
lengths, of the same language and ITN choice (funasr's ``inference`` takes one of each per
call). The decode is funasr's own ``generate(language=..., use_itn=...)``, so the text is
exactly what funasr gives.

SenseVoice writes its tags in front of the text (``<|zh|><|NEUTRAL|><|Speech|><|woitn|>``);
they become the result's :class:`~shared.messages.SpeechTags` and never stay in the text.
Its ``use_itn`` also punctuates, so a pool's punctuation model and wetext's ITN are not run
on its text: ``StreamOptions.model_itn`` is the one switch, as ``svs_itn`` is in FunASR's C++
server.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shared.audio import Samples
from shared.engines import EngineCapabilities, EngineName
from shared.messages import EngineSpec, SpeechTags, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.paraformer import load_automodel, to_float
from workers.engines.paraformer_offline import similar_lengths
from workers.engines.table import Answer, TableEngine, engine_error

_TAG = re.compile(r"<\|([^|<>]*)\|>")
# The prompt ids SenseVoiceSmall's embedding takes in front of the features (its lid_dict
# and textnorm_dict): the language, and whether its own ITN is on.
LANGUAGE_QUERY = {"auto": 0, "zh": 3, "en": 4, "yue": 7, "ja": 11, "ko": 12, "nospeech": 13}
TEXT_NORM_QUERY = {"withitn": 14, "woitn": 15}
# The tags SenseVoiceSmall writes, by what they say (funasr.utils.postprocess_utils).
LANGUAGES = frozenset({"zh", "en", "yue", "ja", "ko", "nospeech"})
EMOTIONS = frozenset(
    {"HAPPY", "SAD", "ANGRY", "NEUTRAL", "FEARFUL", "DISGUSTED", "SURPRISED", "EMO_UNKNOWN"}
)
EVENTS = frozenset(
    {"Speech", "BGM", "Laughter", "Applause", "Cry", "Sneeze", "Breath", "Cough", "Event_UNK"}
)


def split_tags(raw: str) -> tuple[str, SpeechTags]:
    """SenseVoice's decoded text without its tags, and the tags. The first tag of each kind
    counts (a long utterance may repeat them); every tag, of a known kind or not, leaves the
    text."""
    language = emotion = event = ""
    for name in _TAG.findall(raw):
        if name in LANGUAGES and not language:
            language = name
        elif name in EMOTIONS and not emotion:
            emotion = name.lower()
        elif name in EVENTS and not event:
            event = name.lower()
    return _TAG.sub("", raw).strip(), SpeechTags(language, emotion, event)


@dataclass(slots=True)
class _Utterance:
    options: StreamOptions
    pieces: list[Samples] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Final:
    index: int
    item: ChunkItem
    audio: Samples
    options: StreamOptions


class SenseVoiceEngine(TableEngine[_Utterance]):
    name = EngineName.SENSEVOICE
    capabilities = EngineCapabilities(text_is_delta=True, decodes_at_final=True, languages=True)

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._model = model

    @classmethod
    def load(cls, spec: EngineSpec) -> SenseVoiceEngine:
        if spec.model_dir is None:
            raise ValueError("the sensevoice engine needs a model directory")
        return cls(load_automodel(spec.model_dir, spec.device, spec.threads))

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self.streams.open(stream_id, _Utterance(options))

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        step = self.streams.step(items)
        finals: list[_Final] = []
        for index, item, utterance in step.pending():
            utterance.pieces.append(item.samples)
            if not item.final:
                step.answer(index)
                continue
            audio = np.concatenate(utterance.pieces)
            finals.append(_Final(index, item, audio, utterance.options))
        for final in finals:
            if not len(final.audio):  # nothing to decode: no text, and no tags
                step.answer(final.index)
        for group in _calls(finals):
            try:
                answers = self._recognise(group)
            except Exception as exc:  # the call failed: so did every utterance in it
                for final in group:
                    step.fail(final.item.stream_id, engine_error(exc))
                continue
            for final, answer in zip(group, answers, strict=True):
                step.answer(final.index, answer)
        return step.outputs()

    def _recognise(self, group: list[_Final]) -> list[Answer]:
        """One ``generate`` call: the group shares a language and an ITN choice."""
        options = group[0].options
        results = self._model.generate(
            input=[to_float(final.audio) for final in group],
            batch_size=len(group),
            language=options.language,
            use_itn=options.model_itn,
            disable_pbar=True,
        )
        answers = []
        for result in results:
            text, tags = split_tags(str(result.get("text", "")))
            answers.append(Answer(text, tags=tags))
        return answers


def _calls(finals: list[_Final]) -> list[list[_Final]]:
    """The finals that share each ``generate`` call: the same language and ITN choice, and
    similar lengths (``similar_lengths``: padding a short clip to a long one costs more than
    a second call)."""
    by_choice: dict[tuple[str, bool], list[_Final]] = {}
    for final in finals:
        if len(final.audio):
            key = (final.options.language, final.options.model_itn)
            by_choice.setdefault(key, []).append(final)
    calls: list[list[_Final]] = []
    for same in by_choice.values():
        lengths = sorted((len(final.audio), n) for n, final in enumerate(same))
        order = [n for _, n in lengths]
        audio_lengths = [len(final.audio) for final in same]
        for run in similar_lengths(order, audio_lengths.__getitem__):
            calls.append([same[n] for n in run])
    return calls
