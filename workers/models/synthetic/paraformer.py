"""Build random-weight FunASR Paraformer model directories with the real architectures.

Model hubs are unreachable from our machines, so tests and benchmarks run on models that
have exactly the real shapes (from the reference configs) and random weights. The output
directory is what ``funasr.AutoModel(model=DIR)`` loads from a hub download: ``config.yaml``,
``model.pt``, ``tokens.json`` and ``am.mvn`` (SenseVoiceSmall's, as its hub directory has them:
``workers.models.synthetic.sensevoice``).

Usage::

    python -m workers.models.synthetic OUT_DIR \
        --kind streaming|offline|seaco|vad|punc|sensevoice|campplus \
        --size tiny|large
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import yaml

from workers.engines.runtime.funasr_quiet import quiet_funasr
from workers.models.synthetic.base import (
    LARGE_VOCAB,
    TINY_VOCAB,
    ModelSize,
    ParaformerBuild,
    build_tokens,
    format_cmvn,
    frontend_conf,
    save_weights,
)

LFR_DIM = 80 * 7
# The CIF predictor fires a token each time its summed weights cross 1.0; with alpha near
# 0.3 per encoder frame (~100 ms after LFR) it emits about 3 tokens per 600 ms chunk,
# roughly the rate of real speech, so the decoder does real work on every chunk.
PREDICTOR_TARGET_ALPHA = 0.3

_ENCODER_LARGE: dict[str, Any] = {
    "output_size": 512,
    "attention_heads": 4,
    "linear_units": 2048,
    "num_blocks": 50,
    "dropout_rate": 0.1,
    "positional_dropout_rate": 0.1,
    "attention_dropout_rate": 0.1,
    "pos_enc_class": "SinusoidalPositionEncoder",
    "normalize_before": True,
    "kernel_size": 11,
    "sanm_shfit": 0,
    "selfattention_layer_type": "sanm",
}
_ENCODER_TINY: dict[str, Any] = {
    **_ENCODER_LARGE,
    "output_size": 64,
    "linear_units": 128,
    "num_blocks": 2,
}
_DECODER_LARGE: dict[str, Any] = {
    "attention_heads": 4,
    "linear_units": 2048,
    "num_blocks": 16,
    "dropout_rate": 0.1,
    "positional_dropout_rate": 0.1,
    "self_attention_dropout_rate": 0.1,
    "src_attention_dropout_rate": 0.1,
    "att_layer_num": 16,
    "kernel_size": 11,
}
_DECODER_TINY: dict[str, Any] = {
    **_DECODER_LARGE,
    "linear_units": 128,
    "num_blocks": 1,
    "att_layer_num": 1,
}
_STREAMING_ENCODER_EXTRA: dict[str, Any] = {
    "input_layer": "pe_online",
    "chunk_size": [12, 15],
    "stride": [8, 10],
    "pad_left": [0, 0],
    "encoder_att_look_back_factor": [4, 4],
    "decoder_att_look_back_factor": [1, 1],
}
_SPECAUG: dict[str, Any] = {
    "apply_time_warp": False,
    "time_warp_window": 5,
    "time_warp_mode": "bicubic",
    "apply_freq_mask": True,
    "freq_mask_width_range": [0, 30],
    "lfr_rate": 6,
    "num_freq_mask": 1,
    "apply_time_mask": True,
    "time_mask_width_range": [0, 12],
    "num_time_mask": 1,
}


def build_config(
    kind: ParaformerBuild, size: ModelSize, timestamps: bool = False
) -> dict[str, Any]:
    """The config.yaml of the reference architecture (``shared/reference/*.yaml``).

    ``timestamps`` (offline only): FunASR's BiCifParaformer instead, the offline model of
    ``paraformer-large-vad-punc`` that also predicts each token's time.
    """
    if kind == "seaco":  # a BiCifParaformer with a hotword path
        from workers.models.synthetic.seaco import seaco_config

        vocab_size = TINY_VOCAB if size == "tiny" else LARGE_VOCAB
        return seaco_config(build_config("offline", size, timestamps=True), size, vocab_size)
    streaming = kind == "streaming"
    encoder = copy.deepcopy(_ENCODER_TINY if size == "tiny" else _ENCODER_LARGE)
    decoder = copy.deepcopy(_DECODER_TINY if size == "tiny" else _DECODER_LARGE)
    if streaming:
        encoder.update(copy.deepcopy(_STREAMING_ENCODER_EXTRA))
        decoder["sanm_shfit"] = 5
    else:
        encoder["input_layer"] = "pe"
        decoder["sanm_shfit"] = 0
    predictor: dict[str, Any] = {
        "idim": encoder["output_size"],
        "threshold": 1.0,
        "l_order": 1,
        "r_order": 1,
        "tail_threshold": 0.45,
    }
    if timestamps:
        predictor.update(
            smooth_factor2=0.25,
            noise_threshold2=0.01,
            upsample_times=3,
            use_cif1_cnn=False,
            upsample_type="cnn_blstm",
        )
    model = "ParaformerStreaming" if streaming else "Paraformer"
    return {
        "model": "BiCifParaformer" if timestamps and not streaming else model,
        "model_conf": {
            "ctc_weight": 0.0,
            "lsm_weight": 0.1,
            "length_normalized_loss": True,
            "predictor_weight": 1.0,
            "predictor_bias": 1,
            "sampling_ratio": 0.75,
        },
        "encoder": "SANMEncoderChunkOpt" if streaming else "SANMEncoder",
        "encoder_conf": encoder,
        "decoder": "ParaformerSANMDecoder",
        "decoder_conf": decoder,
        "predictor": "CifPredictorV3" if timestamps and not streaming else "CifPredictorV2",
        "predictor_conf": predictor,
        "frontend": "WavFrontendOnline" if streaming else "WavFrontend",
        "frontend_conf": frontend_conf(lfr_m=7, lfr_n=6),
        "specaug": "SpecAugLFR",
        "specaug_conf": copy.deepcopy(_SPECAUG),
        "tokenizer": "CharTokenizer",
        "tokenizer_conf": {"unk_symbol": "<unk>", "split_with_space": True},
        "ctc_conf": {
            "dropout_rate": 0.0,
            "ctc_type": "builtin",
            "reduce": True,
            "ignore_nan_grad": True,
        },
        "normalize": None,
    }


def build_streaming(out_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """A streaming Paraformer (``ParaformerStreaming``)."""
    return build_model_dir(out_dir, "streaming", size, seed)


def build_offline(out_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """An offline Paraformer (``Paraformer``)."""
    return build_model_dir(out_dir, "offline", size, seed)


def build_bicif(out_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """An offline BiCifParaformer: it predicts each token's time too."""
    return build_model_dir(out_dir, "offline", size, seed, timestamps=True)


def build_seaco(out_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """A SeACo-Paraformer: a BiCifParaformer with a hotword path."""
    return build_model_dir(out_dir, "seaco", size, seed)


def build_model_dir(
    out_dir: Path,
    kind: ParaformerBuild,
    size: ModelSize,
    seed: int = 0,
    timestamps: bool = False,
    vocabulary: int = 0,
) -> Path:
    """Write a loadable random-weight Paraformer directory; deterministic for a seed.
    ``vocabulary``: which characters its tokens are (``build_tokens``)."""
    import torch

    # Importing funasr's model packages fills the registry tables.
    with quiet_funasr():
        import funasr.models.bicif_paraformer.model
        import funasr.models.paraformer.model
        import funasr.models.paraformer_streaming.model
        import funasr.models.seaco_paraformer.model  # noqa: F401
        from funasr.register import tables

    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    config = build_config(kind, size, timestamps)
    tokens = build_tokens(TINY_VOCAB if size == "tiny" else LARGE_VOCAB, vocabulary)

    torch.manual_seed(seed)
    model_class = tables.model_classes[config["model"]]
    kwargs: dict[str, Any] = {**config, **config["model_conf"]}
    kwargs.update(input_size=LFR_DIM, vocab_size=len(tokens))
    model = model_class(**kwargs)
    _tune_predictor(model)
    if kind == "seaco":
        from workers.models.synthetic.seaco import tune_bias_path, write_seg_dict

        tune_bias_path(model, size)
        write_seg_dict(out_dir, tokens)
    model.eval()

    generator = torch.Generator().manual_seed(seed + 1)
    means = (torch.rand(LFR_DIM, generator=generator) * 4 + 8).tolist()
    inv_stds = (torch.rand(LFR_DIM, generator=generator) * 0.2 + 0.2).tolist()

    (out_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (out_dir / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False))
    (out_dir / "am.mvn").write_text(format_cmvn(means, inv_stds))
    save_weights(model.state_dict(), out_dir / "model.pt")
    return out_dir


def _tune_predictor(model: Any) -> None:
    """Make the CIF predictor fire at about the rate of real speech.

    With random weights the predictor's sigmoid sits near 0.5 or saturates, so it fires
    erratically or never, and the decoder would never run. A small output weight and a bias
    of logit(alpha) give alphas close to alpha whatever the encoder says.
    """
    import torch

    # BiCifParaformer's second, upsampled CIF (its timestamps) gets the same treatment.
    outputs = [model.predictor.cif_output, getattr(model.predictor, "cif_output2", None)]
    with torch.no_grad():
        for output in outputs:
            if output is not None:
                output.weight.mul_(0.01)
                alpha = PREDICTOR_TARGET_ALPHA
                output.bias.fill_(math.log(alpha / (1 - alpha)))
