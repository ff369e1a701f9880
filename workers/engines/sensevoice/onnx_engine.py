"""SenseVoiceSmall under ONNX Runtime: the ``sensevoice`` engine with another recogniser.

Towards the worker this is ``sensevoice`` (the same buffering, batching and tags); one
group's decode differs. funasr's ``WavFrontend`` in numpy (``onnx_frontend``) for each
utterance, the rows padded into one call of funasr's own exported graph
(``workers.models.export.sensevoice``) with each row's language and text-norm prompt, then
per row what ``SenseVoiceSmall.inference`` does with the logits: greedy argmax over the
row's frames (the prompt frames included), repeats merged, blanks dropped, the pieces
decoded by the model's SentencePiece model. Neither torch nor funasr is imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from shared.engines import Precision
from shared.messages import Decoded, EngineSpec
from workers.engines.paraformer.streaming import to_float
from workers.engines.runtime.onnx_files import OfflineOnnxFiles, require_export
from workers.engines.runtime.onnx_frontend import UtteranceFrontend, pad_rows
from workers.engines.runtime.onnx_session import open_session
from workers.engines.sensevoice.engine import (
    LANGUAGE_QUERY,
    TEXT_NORM_QUERY,
    SenseVoiceEngine,
    split_tags,
)
from workers.engines.whole_utterance import Final

BLANK_ID = 0
DEFAULT_BPE_MODEL = "chn_jpn_yue_eng_ko_spectok.bpe.model"  # the hub directory's name


def bpe_model(model_dir: Path) -> Path:
    """The directory's SentencePiece model, as ``configuration.json`` names it."""
    try:
        metas = json.loads((model_dir / "configuration.json").read_text())
        name = metas["file_path_metas"]["tokenizer_conf"]["bpemodel"]
    except (OSError, ValueError, KeyError, TypeError):
        name = DEFAULT_BPE_MODEL
    return model_dir / str(name)


class SenseVoiceOnnxEngine(SenseVoiceEngine):
    name = "sensevoice-onnx"

    def __init__(self, model_dir: Path, precision: Precision, device: str, threads: int) -> None:
        import sentencepiece

        super().__init__(model=None)
        config = yaml.safe_load((model_dir / "config.yaml").read_text())
        self._frontend = UtteranceFrontend(model_dir / "am.mvn", dict(config["frontend_conf"]))
        self._pieces = sentencepiece.SentencePieceProcessor(model_file=str(bpe_model(model_dir)))
        self._session: Any = open_session(
            OfflineOnnxFiles.of(model_dir, precision).model, device, threads
        )

    @classmethod
    def load(cls, spec: EngineSpec) -> SenseVoiceOnnxEngine:
        if spec.model_dir is None:
            raise ValueError("the sensevoice-onnx engine needs a model directory")
        model_dir = Path(spec.model_dir)
        require_export(model_dir, spec.precision)
        return cls(model_dir, spec.precision, spec.device, spec.threads)

    def recognise(self, group: list[Final]) -> list[Decoded]:
        """One graph call for the group, each row padded to the longest."""
        features = [self._frontend(to_float(final.audio)) for final in group]
        speech, lengths = pad_rows(features)
        feeds = {
            "speech": speech,
            "speech_lengths": lengths,
            "language": np.array([LANGUAGE_QUERY[f.options.language] for f in group], np.int32),
            "textnorm": np.array(
                [TEXT_NORM_QUERY["withitn" if f.options.model_itn else "woitn"] for f in group],
                np.int32,
            ),
        }
        logits, frames = self._session.run(None, feeds)
        answers = []
        for row in range(len(group)):
            best = logits[row, : int(frames[row])].argmax(axis=-1)
            merged = best[np.insert(best[1:] != best[:-1], 0, True)] if len(best) else best
            ids = [int(i) for i in merged if i != BLANK_ID]
            text, tags = split_tags(str(self._pieces.decode(ids)))
            answers.append(Decoded(text, tags=tags))
        return answers
