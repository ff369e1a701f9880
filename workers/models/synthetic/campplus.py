"""A random-weight CAM++ speaker-embedding directory, with the real architecture.

The template is ``shared/reference/campplus-sv-zh.yaml``: the model part of
``iic/speech_campplus_sv_zh-cn_16k-common``'s config.yaml, the model behind funasr's
``AutoModel(spk_model="cam++")``. The directory is what ``AutoModel(model=DIR)`` loads:
``config.yaml`` and ``model.pt`` (the hub's ``campplus_cn_common.bin`` under funasr's default
weights name). The weights are funasr's own initialisation of ``CAMPPlus`` (Kaiming-normal
convolutions) for a seed: 6.8 M parameters like the real model, one size, so ``tiny`` and
``large`` are the same build.

Its batch norms' statistics are then estimated as training would leave them: the running
means and variances of 256 clips of 1.5 s of synthetic voices of random pitch and timbre
(``workers.models.synthetic.voices``), averaged over every batch. With the initial ones
(mean 0, variance 1) every input's embedding points the same way (cosine 0.99 between two
different voices), and funasr's clustering would find one speaker in anything. With them,
two voices' windows are 0.33 alike within a voice and -0.02 across, and the clustering
tells them apart as it would real speakers: tests can tell a wrong label from a right one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from workers.engines.runtime.funasr_quiet import quiet_funasr
from workers.models.synthetic.base import ModelSize, save_weights
from workers.models.synthetic.voices import Voice, speak

CALIBRATION_BATCHES = 16
CALIBRATION_CLIPS = 16  # per batch
CALIBRATION_SECONDS = 1.5  # funasr's diarization window (sv_chunk's seg_dur)

CAMPPLUS_CONFIG: dict[str, Any] = {
    "model": "CAMPPlus",
    "model_conf": {
        "feat_dim": 80,
        "embedding_size": 192,
        "growth_rate": 32,
        "bn_size": 4,
        "init_channels": 128,
        "config_str": "batchnorm-relu",
        "memory_efficient": True,
        "output_level": "segment",
    },
}


def build_campplus(out_dir: Path, size: ModelSize, seed: int = 0) -> Path:
    """CAM++ has one size, as the real model: tiny and large are the same."""
    return build_campplus_dir(out_dir, seed)


def build_campplus_dir(out_dir: Path, seed: int = 0) -> Path:
    """Write a loadable random-weight CAM++ directory; deterministic for a seed."""
    import torch

    with quiet_funasr():
        import funasr.models.campplus.model  # noqa: F401  (fills the registry)
        from funasr.register import tables

    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = tables.model_classes[CAMPPLUS_CONFIG["model"]](**CAMPPLUS_CONFIG["model_conf"])
    _estimate_norm_statistics(model, seed)
    (out_dir / "config.yaml").write_text(yaml.safe_dump(CAMPPLUS_CONFIG, sort_keys=False))
    save_weights(model.state_dict(), out_dir / "model.pt")
    return out_dir


def _estimate_norm_statistics(model: Any, seed: int) -> None:
    """Every batch norm's running statistics, from synthetic voices; the model left in eval."""
    import numpy as np
    import torch

    with quiet_funasr():
        from funasr.models.campplus.utils import extract_feature

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches, not a decaying one
    rng = np.random.default_rng(seed)
    model.train()
    with torch.no_grad():
        for _ in range(CALIBRATION_BATCHES):
            clips = []
            for _ in range(CALIBRATION_CLIPS):
                voice = Voice(rng.uniform(80.0, 300.0), rng.uniform(0.5, 2.5))
                pcm = speak(voice, CALIBRATION_SECONDS, int(rng.integers(1 << 30)))
                clips.append(torch.from_numpy(pcm.astype(np.float32) / 32768.0))
            features, _, _ = extract_feature(clips)
            model(features)
    for norm in norms:
        norm.momentum = 0.1  # torch's default, as a trained model's state has it
    # The embedding's own norm centres it but does not whiten it: divided by their own small
    # spreads, the directions the voices hardly move would be noise made as large as the
    # ones that tell voices apart.
    embedding_norm = model.xvector.dense.nonlinear.batchnorm
    embedding_norm.running_var.fill_(float(embedding_norm.running_var.mean()))
    model.eval()
