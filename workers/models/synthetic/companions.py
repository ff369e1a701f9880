"""Random-weight FSMN-VAD and CT-Transformer directories: FunASR's 2pass companions.

FunASR's 2pass server finds sentence ends with ``fsmn-vad`` and punctuates the offline
pass with ``ct-punc``. Like ``workers.models.synthetic.paraformer`` for the Paraformers,
these builders write what a hub download holds (``config.yaml``, ``model.pt``, ``am.mvn``
/ ``tokens.json``) with the real architectures and random weights, so that the whole path runs here.

Random weights make a VAD whose network says "speech" for almost every frame (the silence
class is 1 of 248 outputs). The synthetic config therefore sets the model's own
``decibel_thres`` (FunASR's option: frames quieter than this are silence whatever the
network says) to about -40 dBFS: the decisions are energy-based, and everything else
(windows, start look-back, end look-ahead, ``max_end_silence_time``) is FunASR's real state
machine. Real weights need no such threshold; the real config's value is -100 (off).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml

from workers.engines.runtime.funasr_quiet import quiet_funasr
from workers.models.synthetic.base import (
    LARGE_VOCAB,
    TINY_VOCAB,
    ModelSize,
    build_tokens,
    format_cmvn,
    frontend_conf,
    save_weights,
)

VAD_FEATURE_DIM = 80 * 5  # 80 mel bins, LFR of 5 frames with a shift of 1
# A 25 ms frame (400 samples in [-1, 1)) at -40 dBFS RMS: 10 * log10(400 * 1e-4).
SYNTHETIC_DECIBEL_THRESHOLD = -14.0
# ct-punc's classes; "_" is no punctuation. Full-width marks, as Chinese text has them.
PUNC_LIST = ["<unk>", "_", "\uff0c", "\u3002", "\uff1f", "\u3001"]
PUNC_LARGE_VOCAB = 272727  # punc_ct-transformer_zh-cn-common-vocab272727
PuncSize = Literal["tiny", "large"]


def vad_config() -> dict[str, Any]:
    """``fsmn-vad``'s config.yaml (speech_fsmn_vad_zh-cn-16k-common), but for the
    decibel threshold that stands in for trained weights (see the module docstring)."""
    return {
        "frontend": "WavFrontendOnline",
        "frontend_conf": frontend_conf(lfr_m=5, lfr_n=1),
        "model": "FsmnVADStreaming",
        "model_conf": {
            "sample_rate": 16000,
            "detect_mode": 1,
            "snr_mode": 0,
            "max_end_silence_time": 800,
            "max_start_silence_time": 3000,
            "do_start_point_detection": True,
            "do_end_point_detection": True,
            "window_size_ms": 200,
            "sil_to_speech_time_thres": 150,
            "speech_to_sil_time_thres": 150,
            "speech_2_noise_ratio": 1.0,
            "do_extend": 1,
            "lookback_time_start_point": 200,
            "lookahead_time_end_point": 100,
            "max_single_segment_time": 60000,
            "snr_thres": -100.0,
            "noise_frame_num_used_for_snr": 100,
            "decibel_thres": SYNTHETIC_DECIBEL_THRESHOLD,
            "speech_noise_thres": 0.6,
            "fe_prior_thres": 0.0001,
            "silence_pdf_num": 1,
            "sil_pdf_ids": [0],
            "speech_noise_thresh_low": -0.1,
            "speech_noise_thresh_high": 0.3,
            "output_frame_probs": False,
            "frame_in_ms": 10,
            "frame_length_ms": 25,
        },
        "encoder": "FSMN",
        "encoder_conf": {
            "input_dim": VAD_FEATURE_DIM,
            "input_affine_dim": 140,
            "fsmn_layers": 4,
            "linear_dim": 250,
            "proj_dim": 128,
            "lorder": 20,
            "rorder": 0,
            "lstride": 1,
            "rstride": 0,
            "output_affine_dim": 140,
            "output_dim": 248,
        },
    }


def punc_config(size: PuncSize) -> dict[str, Any]:
    """``ct-punc``'s config.yaml; ``tiny`` shrinks the encoder (and the vocabulary, in
    :func:`build_punc_dir`) for tests, ``large`` has the real shapes."""
    large = size == "large"
    return {
        "model": "CTTransformer",
        "model_conf": {
            "ignore_id": 0,
            "embed_unit": 256 if large else 32,
            "att_unit": 256 if large else 32,
            "dropout_rate": 0.1,
            "punc_list": list(PUNC_LIST),
            "punc_weight": [1.0] * len(PUNC_LIST),
            "sentence_end_id": 3,
        },
        "encoder": "SANMEncoder",
        "encoder_conf": {
            "input_size": 256 if large else 32,
            "output_size": 256 if large else 32,
            "attention_heads": 8 if large else 2,
            "linear_units": 1024 if large else 64,
            "num_blocks": 4 if large else 1,
            "dropout_rate": 0.1,
            "positional_dropout_rate": 0.1,
            "attention_dropout_rate": 0.0,
            "input_layer": "pe",
            "pos_enc_class": "SinusoidalPositionEncoder",
            "normalize_before": True,
            "kernel_size": 11,
            "sanm_shfit": 0,
            "selfattention_layer_type": "sanm",
        },
        "tokenizer": "CharTokenizer",
        "tokenizer_conf": {"unk_symbol": "<unk>"},
    }


def build_vad(out_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """The FSMN-VAD has one size (0.4 M parameters): tiny and large are the same model."""
    return build_vad_dir(out_dir, seed)


def build_vad_dir(out_dir: Path, seed: int = 0) -> Path:
    """Write a loadable random-weight FSMN-VAD directory; deterministic for a seed."""
    import torch

    with quiet_funasr():
        import funasr.models.fsmn_vad_streaming.model  # noqa: F401  (fills the registry)
        from funasr.register import tables

    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    config = vad_config()
    torch.manual_seed(seed)
    model = tables.model_classes[config["model"]](**config, **config["model_conf"])
    model.eval()
    generator = torch.Generator().manual_seed(seed + 1)
    means = (torch.rand(VAD_FEATURE_DIM, generator=generator) * 4 + 8).tolist()
    inv_stds = (torch.rand(VAD_FEATURE_DIM, generator=generator) * 0.2 + 0.2).tolist()
    (out_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (out_dir / "am.mvn").write_text(format_cmvn(means, inv_stds))
    save_weights(model.state_dict(), out_dir / "model.pt")
    return out_dir


def build_punc_dir(out_dir: Path, size: PuncSize, seed: int = 0) -> Path:
    """Write a loadable random-weight CT-Transformer directory; deterministic for a seed.

    Its vocabulary holds the synthetic Paraformers' characters (``build_tokens``), so the
    punctuation model sees known tokens in what they transcribe.
    """
    import torch

    with quiet_funasr():
        import funasr.models.ct_transformer.model  # noqa: F401  (fills the registry)
        from funasr.register import tables

    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    config = punc_config(size)
    tokens = build_tokens(TINY_VOCAB if size == "tiny" else LARGE_VOCAB)
    if size == "large":  # the real vocabulary's size: placeholders after the characters
        tokens = tokens[:-1] + [f"<w{i}>" for i in range(PUNC_LARGE_VOCAB - len(tokens))]
        tokens.append("<unk>")
    torch.manual_seed(seed)
    kwargs: dict[str, Any] = {**config, **config["model_conf"], "vocab_size": len(tokens)}
    model = tables.model_classes[config["model"]](**kwargs)
    with torch.no_grad():
        # Class 0 is "<unk>", which a trained model never outputs but funasr would write
        # into the text as it is; random weights would.
        model.decoder.bias[0] = -100.0
    model.eval()
    (out_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (out_dir / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False))
    save_weights(model.state_dict(), out_dir / "model.pt")
    return out_dir
