"""FunASR's offline Paraformer under ONNX Runtime: whole utterances, several in one call.

Towards the worker this is ``paraformer-offline`` (it is that engine with another
recogniser): a stream's audio is buffered until its final piece, results before it carry no
text, the utterances ending in the same step are decoded together, one call per group of
similar lengths (``whole_utterance.calls``), and the text is punctuated as there.

What differs is one group's decode (``_recognise``): funasr's ``WavFrontend`` in numpy
(``onnx_frontend.UtteranceFrontend``) for each utterance, the rows padded into one
``[B, T, 560]`` call of the exported graph (``workers.models.export.offline``), then per row
funasr's ``Paraformer.inference``: greedy argmax over the logits up to the row's token
count, blank/<s>/</s> dropped, ``sentence_postprocess``. Neither torch nor funasr is
imported (unless the pool punctuates with funasr's PyTorch CT-Transformer).

The exported graph zeroes each row's padded encoder frames before the CIF predictor, so
that a row's text is the same batched or alone. funasr's PyTorch batch does not (its
predictor's convolution and tail frame read the padding), so ``paraformer-offline`` may give
an utterance another text when it is decoded beside a longer one; this engine gives the
text funasr's ``generate`` gives the utterance alone.

Hotwords and timestamps are not exported: SeACo-Paraformer and BiCifParaformer directories
stay on ``paraformer-offline`` (``workers.engines.select_engine``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from shared.engines import Precision
from shared.messages import EngineSpec
from workers.engines.base import Timestamps
from workers.engines.paraformer.offline import ParaformerOfflineEngine
from workers.engines.paraformer.streaming import to_float
from workers.engines.runtime.model_dir import model_class
from workers.engines.runtime.onnx_files import OfflineOnnxFiles, require_export
from workers.engines.runtime.onnx_frontend import (
    UtteranceFrontend,
    load_sentence_postprocess,
    pad_rows,
)
from workers.engines.runtime.onnx_session import open_session
from workers.engines.whole_utterance import Final

# The offline model classes the export carries whole. SeACo's hotword path and BiCif's
# timestamps are not exported: their directories stay on ``paraformer-offline``.
EXPORTED_MODEL_CLASSES = ("Paraformer",)


def serves(model_dir: Path) -> bool:
    """Whether this engine (and ``workers.models.export.offline``) can take the directory."""
    return model_class(model_dir) in EXPORTED_MODEL_CLASSES


class ParaformerOfflineOnnxEngine(ParaformerOfflineEngine):
    name = "paraformer-offline-onnx"

    def __init__(
        self,
        model_dir: Path,
        precision: Precision,
        device: str,
        threads: int,
        punctuator: Any = None,
    ) -> None:
        super().__init__(model=None, punctuator=punctuator)
        config = yaml.safe_load((model_dir / "config.yaml").read_text())
        model_conf = config.get("model_conf", {})
        # funasr's Paraformer defaults; a config may name others.
        self._dropped = {
            int(model_conf.get("blank_id", 0)),
            int(model_conf.get("sos", 1)),
            int(model_conf.get("eos", 2)),
        }
        self._frontend = UtteranceFrontend(model_dir / "am.mvn", dict(config["frontend_conf"]))
        self._tokens: list[str] = json.loads((model_dir / "tokens.json").read_text())
        self._sentence_postprocess = load_sentence_postprocess()
        self._session = open_session(
            OfflineOnnxFiles.of(model_dir, precision).model, device, threads
        )

    @classmethod
    def load(cls, spec: EngineSpec) -> ParaformerOfflineOnnxEngine:
        if spec.model_dir is None:
            raise ValueError("the paraformer-offline-onnx engine needs a model directory")
        model_dir = Path(spec.model_dir)
        require_export(model_dir, spec.precision)
        punctuator = cls._load_punctuator(spec)
        return cls(model_dir, spec.precision, spec.device, spec.threads, punctuator)

    def _recognise(self, finals: list[Final]) -> list[tuple[str, Timestamps]]:
        """One graph call for the group, each row padded to the longest."""
        features = [self._frontend(to_float(final.audio)) for final in finals]
        speech, lengths = pad_rows(features)
        logits, token_num = self._session.run(None, {"speech": speech, "speech_lengths": lengths})
        results: list[tuple[str, Timestamps]] = []
        for row in range(len(finals)):
            ids = logits[row, : int(token_num[row])].argmax(axis=-1).tolist()
            tokens = [self._tokens[i] for i in ids if i not in self._dropped]
            text, _ = self._sentence_postprocess(tokens)
            results.append((str(text), ()))
        return results
