"""Synthetic models: the real architecture, random weights, deterministic, loadable offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from workers.engines.paraformer import load_automodel, to_float
from workers.synthetic import LARGE_VOCAB, build_config, build_model_dir, main

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"


def _state(path: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(path / "model.pt", weights_only=True)
    return state


def test_same_seed_gives_the_same_model(tmp_path: Path) -> None:
    a = build_model_dir(tmp_path / "a", "streaming", "tiny", seed=3)
    b = build_model_dir(tmp_path / "b", "streaming", "tiny", seed=3)
    for name in ("config.yaml", "tokens.json", "am.mvn"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    state_a, state_b = _state(a), _state(b)
    assert state_a.keys() == state_b.keys()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)


def test_other_seed_gives_other_weights(tmp_path: Path) -> None:
    a = _state(build_model_dir(tmp_path / "a", "streaming", "tiny", seed=1))
    b = _state(build_model_dir(tmp_path / "b", "streaming", "tiny", seed=2))
    assert not all(torch.equal(a[k], b[k]) for k in a)


def test_tiny_is_about_a_megabyte_and_loads_offline(tmp_path: Path) -> None:
    out = tmp_path / "tiny"
    assert main([str(out), "--kind", "streaming", "--size", "tiny"]) == 0
    assert 0.5e6 < (out / "model.pt").stat().st_size < 2e6
    model = load_automodel(str(out), "cpu", threads=1)
    audio = np.random.default_rng(0).normal(0, 3000, 9600 * 3).astype(np.int16)
    result = model.generate(input=to_float(audio), cache={}, is_final=True, disable_pbar=True)
    # The tuned predictor fires: the decoder ran and produced tokens.
    assert result[0]["text"]


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the team's reference configs are absent")
@pytest.mark.parametrize(
    ("kind", "size", "reference"),
    [
        ("streaming", "large", "paraformer-streaming-large.yaml"),
        ("streaming", "tiny", "paraformer-streaming-tiny.yaml"),
        ("offline", "large", "paraformer-offline-large.yaml"),
    ],
)
def test_config_matches_the_reference_architecture(kind: str, size: str, reference: str) -> None:
    expected = yaml.safe_load((REFERENCE / reference).read_text())
    assert build_config(kind, size) == expected  # type: ignore[arg-type]


def test_large_streaming_model_has_about_220m_parameters() -> None:
    import funasr.models.paraformer_streaming.model  # noqa: F401
    from funasr.register import tables

    config = build_config("streaming", "large")
    model_class = tables.model_classes[config["model"]]
    model = model_class(**config, **config["model_conf"], input_size=560, vocab_size=LARGE_VOCAB)
    parameters = sum(p.numel() for p in model.parameters())
    assert 200e6 < parameters < 240e6
