"""What every synthetic model directory shares: its sizes, vocabularies, tokens, frontend
and CMVN, in the formats funasr reads (``workers.models.synthetic.paraformer`` builds the
Paraformers, ``workers.models.synthetic.companions`` the FSMN-VAD and CT-Transformer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

# "seaco" is the offline SeACo-Paraformer, which takes hotwords (workers.models.synthetic.seaco).
# "vad" and "punc" are FunASR's 2pass companions (FSMN-VAD, CT-Transformer):
# workers.models.synthetic.companions builds them.
# "sensevoice" is SenseVoiceSmall, an offline model (workers.models.synthetic.sensevoice).
# "campplus" is CAM++, the speaker-embedding model (workers.models.synthetic.campplus).
# The Paraformers' builds (workers.models.synthetic.paraformer); the other families' are
# their modules' own, and every build is a row of workers.engines.kinds.
ParaformerBuild = Literal["streaming", "offline", "seaco"]
ModelSize = Literal["tiny", "large"]

# Paraformer's token conventions: <blank>=0, <s>=1, </s>=2, <unk> last.
LARGE_VOCAB = 8404
TINY_VOCAB = 300


def frontend_conf(lfr_m: int, lfr_n: int) -> dict[str, Any]:
    """FunASR's 80-bin fbank frontend (25 ms / 10 ms), stacking ``lfr_m`` frames every
    ``lfr_n`` (low frame rate): 7/6 for the Paraformers, 5/1 for FSMN-VAD."""
    return {
        "fs": 16000,
        "window": "hamming",
        "n_mels": 80,
        "frame_length": 25,
        "frame_shift": 10,
        # The default dither of 1.0 adds random noise: outputs would not be reproducible.
        "dither": 0.0,
        "lfr_m": lfr_m,
        "lfr_n": lfr_n,
    }


CJK_FIRST, CJK_COUNT = 0x4E00, 20992  # the CJK Unified Ideographs block


# A vocabulary of spoken Chinese numbers only: a model built on it decodes numbers (random
# ones), which gives inverse text normalization something to write as digits.
NUMERALS = -1
NUMERAL_CHARACTERS = "零一二三四五六七八九十百千万亿点"


def build_tokens(vocab_size: int, vocabulary: int = 0) -> list[str]:
    """``<blank>``, ``<s>``, ``</s>``, then CJK characters, then ``<unk>``. ``vocabulary``
    picks which characters: models of different vocabularies share none; ``NUMERALS``
    the spoken digits and units alone, whatever ``vocab_size``."""
    if vocabulary == NUMERALS:
        return ["<blank>", "<s>", "</s>", *NUMERAL_CHARACTERS, "<unk>"]
    first = CJK_FIRST + vocabulary * (vocab_size - 4)
    if vocabulary < 0 or first + vocab_size - 4 > CJK_FIRST + CJK_COUNT:
        raise ValueError(f"vocabulary {vocabulary} is past the CJK block for {vocab_size} tokens")
    body = [chr(first + i) for i in range(vocab_size - 4)]
    return ["<blank>", "<s>", "</s>", *body, "<unk>"]


def format_cmvn(means: list[float], inv_stds: list[float]) -> str:
    """Kaldi nnet-format CMVN, as funasr's WavFrontend reads it from ``am.mvn``."""
    dim = len(means)
    shift = " ".join(f"{-m:.6f}" for m in means)
    scale = " ".join(f"{s:.6f}" for s in inv_stds)
    return (
        "<Nnet>\n"
        f"<Splice> {dim} {dim}\n[ 0 ]\n"
        f"<AddShift> {dim} {dim}\n<LearnRateCoef> 0 [ {shift} ]\n"
        f"<Rescale> {dim} {dim}\n<LearnRateCoef> 0 [ {scale} ]\n"
        "</Nnet>\n"
    )


def save_weights(state: Any, path: Path) -> None:
    """``torch.save`` through a Python file: a write that fails (a full disk) then carries
    its ``OSError`` as the context of torch's error, which alone says only "unexpected pos"
    (``workers.models.resolve`` reports the cause)."""
    import torch

    with path.open("wb") as file:
        torch.save(state, file)
