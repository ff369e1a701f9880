"""A random-weight SeACo-Paraformer: FunASR's hotword model, with the real architecture.

``iic/speech_seaco_paraformer_large_asr_nat-zh-cn-16k-common-vocab8404-pytorch`` is an
offline BiCifParaformer (timestamps included) plus a bias path: each hotword is embedded by
the decoder's embedding and an LSTM, a second decoder (the "seaco decoder") attends from
every output position to the hotwords, and its output layer says, per position, either
``NO_BIAS`` (keep the ordinary decoder's token) or a token that replaces it. The config is
``shared/reference/seaco-paraformer-large.yaml`` (FunASR's own template) without its
training-only sections; ``workers.models.synthetic.paraformer`` builds it, these helpers
add what is SeACo's.

Random weights need two changes to behave like the trained model, in kind if not in text:

- The seaco decoder's cross-attention barely moves its residual stream, so which hotwords
  are given would hardly matter (two different sets gave the same text on most clips). Its
  output projections are scaled up by ``HOTWORD_ATTENTION_GAIN``: the words now steer it.
- Its output layer never picks ``NO_BIAS`` (one id of thousands), so with any hotword every
  token would be replaced. ``NO_BIAS`` gets a bias of ``NO_BIAS_MARGIN`` (the median gap,
  measured on speech-like clips, between it and the best other token): about half of the
  tokens keep the ordinary decoder's choice and the rest take the bias decoder's, which
  depends on the hotwords. Without hotwords the bias path does not run at all, as in FunASR.

funasr splits a multi-character hotword into tokens through the model's ``seg_dict``
(without one, a whole word would be looked up as one token: ``<unk>``), so the directory
also has one: each character maps to itself, as the real one maps Chinese characters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

# The real model's NO_BIAS is 8377 of 8404 tokens; the tiny one keeps the same offset.
NO_BIAS_FROM_END = 8404 - 8377
HOTWORD_ATTENTION_GAIN = 10.0
NO_BIAS_MARGIN = {"tiny": 2.8, "large": 3.5}

_SEACO_DECODER_LARGE: dict[str, Any] = {
    "attention_heads": 4,
    "linear_units": 1024,
    "num_blocks": 4,
    "dropout_rate": 0.1,
    "positional_dropout_rate": 0.1,
    "self_attention_dropout_rate": 0.1,
    "src_attention_dropout_rate": 0.1,
    # No att_layer_num: funasr's default of 6 attention layers, which its hotword filter
    # (more than 50 hotwords: forward_asf6) indexes up to the sixth. Tiny keeps all six.
    "kernel_size": 21,
    "sanm_shfit": 0,
    "use_output_layer": False,
    "wo_input_layer": True,
}
# Half the main decoder's feed-forward width, as in the large model.
_SEACO_DECODER_TINY: dict[str, Any] = {**_SEACO_DECODER_LARGE, "linear_units": 64}


def seaco_config(
    offline: dict[str, Any], size: Literal["tiny", "large"], vocab_size: int
) -> dict[str, Any]:
    """SeACo's config from the offline BiCifParaformer's (``offline``) of the same size."""
    config = dict(offline)
    config["model"] = "SeacoParaformer"
    config["model_conf"] = {
        **offline["model_conf"],
        # The hotword LSTM reads the decoder's embeddings: its width is the model's.
        "inner_dim": offline["encoder_conf"]["output_size"],
        "bias_encoder_type": "lstm",
        "bias_encoder_bid": False,
        "seaco_lsm_weight": 0.1,
        "seaco_length_normal": True,
        "train_decoder": False,
        "NO_BIAS": vocab_size - NO_BIAS_FROM_END,
    }
    # After the decoder, as in FunASR's template.
    ordered: dict[str, Any] = {}
    for key, value in config.items():
        ordered[key] = value
        if key == "decoder_conf":
            ordered["seaco_decoder"] = "ParaformerSANMDecoder"
            source = _SEACO_DECODER_TINY if size == "tiny" else _SEACO_DECODER_LARGE
            ordered["seaco_decoder_conf"] = dict(source)
    return ordered


def tune_bias_path(model: Any, size: Literal["tiny", "large"]) -> None:
    """The two changes of the module docstring, on a freshly initialised SeacoParaformer."""
    import torch

    with torch.no_grad():
        for layer in model.seaco_decoder.decoders:
            layer.src_attn.linear_out.weight.mul_(HOTWORD_ATTENTION_GAIN)
        model.hotword_output_layer.bias[model.NO_BIAS] += NO_BIAS_MARGIN[size]


def write_seg_dict(out_dir: Path, tokens: list[str]) -> None:
    """Every character token maps to itself (``<blank>``, ``<s>``, ``</s>``, ``<unk>`` are
    no characters)."""
    lines = "".join(f"{token} {token}\n" for token in tokens if not token.startswith("<"))
    (out_dir / "seg_dict").write_text(lines, encoding="utf-8")
