"""What a FunASR model directory says about itself: its model class, and what it does.

The class is ``config.yaml``'s ``model:``, the name funasr's registry builds it by; what
that class does is its kind's row (``workers.engines.kinds``).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from workers.engines.kinds import kind_of_class


def model_class(model_dir: Path) -> str:
    config = yaml.safe_load((model_dir / "config.yaml").read_text())
    return str(config.get("model", ""))


def supports_hotwords(model_dir: Path) -> bool:
    """Whether the model directory's class takes ``hotword=`` (SeACo-Paraformer)."""
    kind = kind_of_class(model_class(model_dir))
    return kind is not None and kind.hotwords


def gives_timestamps(model_dir: Path) -> bool:
    """Whether the model directory's class predicts token times (BiCifParaformer, SeACo)."""
    kind = kind_of_class(model_class(model_dir))
    return kind is not None and kind.token_times
