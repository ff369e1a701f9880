"""Random-weight model directories with the real architectures (``python -m
workers.models.synthetic``): model hubs are unreachable from our machines, so tests and
benchmarks run on models of exactly the real shapes (the reference configs) with random
weights, written as funasr's ``AutoModel(model=DIR)`` loads a hub download. Each build is a
row of ``workers.engines.kinds`` (its ``synthetic``), a function of a family's module here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import cast

from workers.engines.kinds import synthetic_builds
from workers.models.synthetic.base import ModelSize

Build = Callable[[Path, ModelSize, int], Path]


def build_synthetic(name: str, out_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """Write build ``name``'s random-weight model directory; deterministic for a seed."""
    entry = synthetic_builds().get(name)
    if entry is None:
        raise ValueError(f"no synthetic build {name!r}; builds: {', '.join(synthetic_builds())}")
    module, _, function = entry.partition(":")
    build = cast(Build, getattr(importlib.import_module(module), function))
    return build(out_dir, size, seed)
