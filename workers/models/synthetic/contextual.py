"""A random-weight Contextual Paraformer: FunASR's first hotword model, with its real shape.

``iic/speech_paraformer-large-contextual_asr_nat-zh-cn-16k-common-vocab8404`` is the
offline Paraformer plus a bias path (funasr's ``ContextualParaformer``): each hotword is
embedded and run through an LSTM, and the decoder's last layer attends from every output
position to the hotwords' final states before the output layer. Without hotwords the bias
path still runs, on funasr's one placeholder word (``<s>``), so its text differs from the
plain Paraformer's too.

The build is the offline Paraformer of the same size and seed (its encoder, predictor and
decoder weights, so the two can be compared), with the decoder swapped for
``ContextualParaformerDecoder`` and the bias path's own weights random. Random weights need
one change to behave like the trained model in kind: the bias attention's output is scaled
by ``HOTWORD_ATTENTION_GAIN``, so which hotwords are given changes the text. Its directory
has a ``seg_dict`` as SeACo's (``workers.models.synthetic.seaco``), for the same reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from workers.engines.runtime.funasr_quiet import quiet_funasr
from workers.models.synthetic.base import ModelSize, save_weights
from workers.models.synthetic.paraformer import LFR_DIM, build_model_dir
from workers.models.synthetic.seaco import write_seg_dict

HOTWORD_ATTENTION_GAIN = 10.0


def contextual_config(offline: dict[str, Any]) -> dict[str, Any]:
    """The Contextual Paraformer's config from the offline Paraformer's of the same size."""
    config = dict(offline)
    config["model"] = "ContextualParaformer"
    config["model_conf"] = {
        **offline["model_conf"],
        # The bias path's width is the decoder's: its attention reads the LSTM's states.
        "inner_dim": offline["encoder_conf"]["output_size"],
        "bias_encoder_type": "lstm",
    }
    config["decoder"] = "ContextualParaformerDecoder"
    decoder = dict(offline["decoder_conf"])
    if decoder["att_layer_num"] < 2:
        # funasr's contextual decoder runs at least one ordinary layer before its last,
        # contextual one (the tiny Paraformer's single layer): the tiny build gets two.
        decoder.update(att_layer_num=2, num_blocks=2)
    config["decoder_conf"] = decoder
    return config


def build_contextual(out_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """A Contextual Paraformer directory; deterministic for a seed."""
    import torch

    with quiet_funasr():
        import funasr.models.contextual_paraformer.model  # noqa: F401
        from funasr.register import tables

    out_dir = build_model_dir(out_dir, "offline", size, seed)
    offline = yaml.safe_load((out_dir / "config.yaml").read_text())
    config = contextual_config(offline)
    tokens: list[str] = json.loads((out_dir / "tokens.json").read_text())
    offline_weights = torch.load(out_dir / "model.pt", map_location="cpu", weights_only=True)

    torch.manual_seed(seed + 2)
    kwargs: dict[str, Any] = {**config, **config["model_conf"]}
    kwargs.update(input_size=LFR_DIM, vocab_size=len(tokens))
    model = tables.model_classes[config["model"]](**kwargs)
    # The offline decoder's last layer is the contextual one's ``last_decoder``.
    offline_last = offline["decoder_conf"]["att_layer_num"] - 1
    weights = {_renamed(name, offline_last): value for name, value in offline_weights.items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected, f"offline weights the contextual model lacks: {unexpected}"
    new_layers = range(offline_last, config["decoder_conf"]["att_layer_num"] - 1)
    assert all(_is_bias_path(name, new_layers) for name in missing), f"unexpected: {missing}"
    with torch.no_grad():
        # [identity | identity]: the layer's output is the Paraformer's plus the bias.
        width = config["encoder_conf"]["output_size"]
        eye = torch.eye(width).unsqueeze(-1)
        model.decoder.bias_output.weight.copy_(torch.cat([eye, eye], dim=1))
        model.decoder.bias_decoder.src_attn.linear_out.weight.mul_(HOTWORD_ATTENTION_GAIN)
    model.eval()

    (out_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    write_seg_dict(out_dir, tokens)
    save_weights(model.state_dict(), out_dir / "model.pt")
    return out_dir


def _renamed(name: str, last: int) -> str:
    """An offline weight's name in the Contextual Paraformer: its decoder's last attention
    layer is the contextual one, ``last_decoder``."""
    prefix = f"decoder.decoders.{last}."
    return "decoder.last_decoder." + name.removeprefix(prefix) if name.startswith(prefix) else name


def _is_bias_path(name: str, new_layers: range) -> bool:
    """The weights a Contextual Paraformer has and the offline one does not: its bias path,
    and the ordinary decoder layers the tiny one gets (``new_layers``)."""
    bias_path = ("bias_embed.", "bias_encoder.", "decoder.bias_decoder.", "decoder.bias_output.")
    added = tuple(f"decoder.decoders.{layer}." for layer in new_layers)
    return name.startswith(bias_path + added)
