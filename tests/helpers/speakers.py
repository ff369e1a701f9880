"""funasr's own speaker labelling, end to end, for the tests to compare with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from workers.engines.paraformer.streaming import to_float
from workers.engines.runtime.funasr_quiet import quiet_funasr


def funasr_sentence_info(
    audio: np.ndarray, asr: Path, vad: Path, punc: Path, speaker: Path
) -> list[dict[str, Any]]:
    """``AutoModel(model, vad_model, punc_model, spk_model).generate`` on ``audio``: its
    sentences, each with the ``spk`` funasr gives it."""
    return list(_generate(audio, asr, vad, punc, speaker)["sentence_info"])


def funasr_speaker_centres(
    audio: np.ndarray, asr: Path, vad: Path, punc: Path, speaker: Path
) -> np.ndarray:
    """The same ``generate`` with ``return_spk_center``: each speaker's mean embedding, at
    the index of its ``spk``."""
    result = _generate(audio, asr, vad, punc, speaker, return_spk_center=True)
    return np.asarray(result["spk_embedding_center"])


def _generate(
    audio: np.ndarray, asr: Path, vad: Path, punc: Path, speaker: Path, **options: Any
) -> dict[str, Any]:
    with quiet_funasr():
        from funasr import AutoModel

        pipeline = AutoModel(
            model=str(asr),
            vad_model=str(vad),
            punc_model=str(punc),
            spk_model=str(speaker),
            disable_update=True,
            disable_pbar=True,
            disable_log=True,
        )
        result: dict[str, Any] = pipeline.generate(input=to_float(audio), **options)[0]
        return result
