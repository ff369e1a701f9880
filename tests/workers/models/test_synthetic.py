"""Synthetic models: the real architecture, random weights, deterministic, loadable offline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from workers.engines.paraformer.offline import hotword_argument
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.models.synthetic.__main__ import main
from workers.models.synthetic.base import LARGE_VOCAB
from workers.models.synthetic.paraformer import build_config, build_model_dir

REFERENCE = Path(__file__).resolve().parents[4] / "shared" / "reference"


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


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="the team's reference configs are absent")
def test_seaco_config_is_funasrs_template_less_its_training_sections() -> None:
    expected = yaml.safe_load((REFERENCE / "seaco-paraformer-large.yaml").read_text())
    training = ("train_conf", "optim", "optim_conf", "scheduler", "scheduler_conf", "dataset")
    for key in (*training, "dataset_conf"):
        del expected[key]
    assert build_config("seaco", "large") == expected


def _speechlike(seed: int, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 3000 * np.sin(2 * np.pi * (200 + 60 * seed) * t)
    return (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)


def test_tiny_seaco_loads_offline_and_its_hotwords_steer_the_decode(tmp_path: Path) -> None:
    from funasr import AutoModel

    out = tmp_path / "seaco"
    assert main([str(out), "--kind", "seaco", "--size", "tiny"]) == 0
    assert (out / "model.pt").stat().st_size < 3e6
    model = AutoModel(model=str(out), disable_update=True, device="cpu", disable_pbar=True)
    chars = json.loads((out / "tokens.json").read_text())
    # seg_dict splits a word into its characters' tokens (without one funasr would look the
    # whole word up as one token: <unk>); the list ends with SeACo's own <s>.
    model.generate(input=to_float(_speechlike(0, 1.0)), hotword=" 一丁 七 ", disable_pbar=True)
    assert model.model.hotword_list == [
        [chars.index("一"), chars.index("丁")],
        [chars.index("七")],
        [1],
    ]
    sets = [("一丁", "七万"), ("丈三", "上下")]
    hotwords = [{}, *({"hotword": hotword_argument(words)} for words in sets)]
    texts = []  # per clip: without hotwords, with one set, with another
    for seed in range(4):
        audio = to_float(_speechlike(seed, 1.0 + 0.5 * seed))
        texts.append([model.generate(input=audio, **kw)[0]["text"] for kw in hotwords])
    assert all(text for clip in texts for text in clip)
    # The bias decoder replaces some tokens, not all (NO_BIAS keeps the decoder's own at
    # the others), and which it replaces depends on the words.
    tokens = [(plain.split(), first.split()) for plain, first, _ in texts]
    assert any(plain != first for plain, first in tokens)
    assert any(a == b for plain, first in tokens for a, b in zip(plain, first, strict=False))
    assert any(first != second for _, first, second in texts)


def test_large_streaming_model_has_about_220m_parameters() -> None:
    import funasr.models.paraformer_streaming.model  # noqa: F401
    from funasr.register import tables

    config = build_config("streaming", "large")
    model_class = tables.model_classes[config["model"]]
    model = model_class(**config, **config["model_conf"], input_size=560, vocab_size=LARGE_VOCAB)
    parameters = sum(p.numel() for p in model.parameters())
    assert 200e6 < parameters < 240e6
