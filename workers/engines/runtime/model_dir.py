"""What a FunASR model directory says about itself: its model class, and what it does.

The class is ``config.yaml``'s ``model:``, the name funasr's registry builds it by.
"""

from __future__ import annotations

from pathlib import Path

import yaml

# The offline models whose generate() uses ``hotword=``: the others ignore it in funasr, and
# we never pass it to them.
HOTWORD_MODEL_CLASSES = ("SeacoParaformer",)
# The offline models that predict each token's time (SeACo is a BiCifParaformer too).
TIMESTAMP_MODEL_CLASSES = ("BiCifParaformer", "SeacoParaformer")


def model_class(model_dir: Path) -> str:
    config = yaml.safe_load((model_dir / "config.yaml").read_text())
    return str(config.get("model", ""))


def supports_hotwords(model_dir: Path) -> bool:
    """Whether the model directory's class takes ``hotword=`` (SeACo-Paraformer)."""
    return model_class(model_dir) in HOTWORD_MODEL_CLASSES


def gives_timestamps(model_dir: Path) -> bool:
    """Whether the model directory's class predicts token times (BiCifParaformer, SeACo)."""
    return model_class(model_dir) in TIMESTAMP_MODEL_CLASSES
