"""SenseVoiceSmall: whole utterances in zh, en, yue, ja and ko, tagged with what it heard.

Like the offline Paraformer (``workers.engines.paraformer.offline``; both are
``workers.engines.whole_utterance``), a stream's audio is buffered in the worker and decoded
when its final piece comes, and the utterances whose finals are in the same step are decoded
together: one ``generate`` call per group of similar lengths, of the same language and ITN
choice (funasr's ``inference`` takes one of each per call). The decode is funasr's own
``generate(language=..., use_itn=...)``, so the text is exactly what funasr gives.

SenseVoice writes its tags in front of the text (``<|zh|><|NEUTRAL|><|Speech|><|woitn|>``);
they become the result's :class:`~shared.messages.SpeechTags` and never stay in the text.
Its ``use_itn`` also punctuates, so a pool's punctuation model and wetext's ITN are not run
on its text: ``StreamOptions.model_itn`` is the one switch, as ``svs_itn`` is in FunASR's C++
server.
"""

from __future__ import annotations

import re
from typing import Any

from shared.engines import EngineCapabilities
from shared.messages import Decoded, EngineSpec, SpeechTags, StreamOptions
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.table import Step, engine_error
from workers.engines.whole_utterance import Final, Utterance, WholeUtteranceEngine, calls

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


class SenseVoiceEngine(WholeUtteranceEngine):
    name = "sensevoice"
    capabilities = EngineCapabilities(text_is_delta=True, decodes_at_final=True, languages=True)

    def __init__(self, model: Any) -> None:
        super().__init__()
        self._model = model

    @classmethod
    def load(cls, spec: EngineSpec) -> SenseVoiceEngine:
        if spec.model_dir is None:
            raise ValueError("the sensevoice engine needs a model directory")
        return cls(load_automodel(spec.model_dir, spec.device, spec.threads))

    def _answer_finals(self, step: Step[Utterance], finals: list[Final]) -> None:
        for final in finals:
            if not len(final.audio):  # nothing to decode: no text, and no tags
                step.answer(final.index)
        for indices in calls(finals, _language_and_itn):
            group = [finals[i] for i in indices]
            try:
                answers = self.recognise(group)
            except Exception as exc:  # the call failed: so did every utterance in it
                for final in group:
                    step.fail(final.item.stream_id, engine_error(exc))
                continue
            for final, answer in zip(group, answers, strict=True):
                step.answer(final.index, answer)

    def recognise(self, group: list[Final]) -> list[Decoded]:
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
            answers.append(Decoded(text, tags=tags))
        return answers


def _language_and_itn(options: StreamOptions) -> tuple[str, bool]:
    """What one ``generate`` call takes once (funasr's ``inference``: one of each per call)."""
    return options.language, options.model_itn
