"""The offline Paraformer engine: whole utterances, several in one generate call."""

from __future__ import annotations

from pathlib import Path

import anyio
import numpy as np
import pytest

from shared.engines import Role
from shared.errors import WorkerLoadError
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from tests.helpers.timing import within
from workers.engines.base import ChunkItem
from workers.engines.paraformer.offline import ParaformerOfflineEngine
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.models.resolve import resolve_model
from workers.models.synthetic.base import NUMERALS
from workers.models.synthetic.paraformer import build_model_dir
from workers.pool import WorkerPool

pytestmark = pytest.mark.slow


def clip(seed: int, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 3000 * np.sin(2 * np.pi * (200 + 60 * seed) * t)
    return (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)


def test_one_utterance_equals_automodel_generate(tiny_offline_model: Path) -> None:
    engine = ParaformerOfflineEngine.load(
        EngineSpec("paraformer-offline", model_dir=str(tiny_offline_model))
    )
    model = load_automodel(str(tiny_offline_model), "cpu", 1)
    for seed in range(3):
        audio = clip(seed, 1.0 + seed)
        engine.open_stream(seed, StreamOptions())
        partial = engine.feed([ChunkItem(seed, 0, audio[:5000], False)])
        assert partial[0].text == ""
        assert not partial[0].final
        (final,) = engine.feed([ChunkItem(seed, 1, audio[5000:], True)])
        expected = model.generate(input=to_float(audio), disable_pbar=True)[0]["text"]
        assert final.final
        assert final.text == expected
        assert final.text  # real text, not an empty comparison
    assert engine.active_streams == 0


def test_finals_in_one_step_are_batched_by_similar_length(tiny_offline_model: Path) -> None:
    """Utterances ending together are decoded in one generate call per group of similar
    lengths (within 1.25x): the texts are funasr's own for those same batched calls."""
    engine = ParaformerOfflineEngine.load(
        EngineSpec("paraformer-offline", model_dir=str(tiny_offline_model))
    )
    model = load_automodel(str(tiny_offline_model), "cpu", 1)
    seconds = [2.0, 1.0, 2.2, 1.1]  # two groups: the 1 s clips, the 2 s clips
    clips = [clip(10 + s, length) for s, length in enumerate(seconds)]
    for s in range(4):
        engine.open_stream(s, StreamOptions())
    outputs = engine.feed([ChunkItem(s, 0, c, True) for s, c in enumerate(clips)])
    expected: dict[int, str] = {}
    for group in ([1, 3], [0, 2]):
        results = model.generate(
            input=[to_float(clips[i]) for i in group], batch_size=2, disable_pbar=True
        )
        expected.update({i: r["text"] for i, r in zip(group, results, strict=True)})
    assert [o.text for o in outputs] == [expected[i] for i in range(4)]
    assert [o.stream_id for o in outputs] == [0, 1, 2, 3]  # answered in the order fed
    engine.open_stream(9, StreamOptions())
    (empty,) = engine.feed([ChunkItem(9, 0, np.zeros(0, np.int16), True)])
    assert empty.text == ""
    assert empty.error is None


def test_the_offline_pool_refuses_a_streaming_model(tiny_streaming_model: Path) -> None:
    with pytest.raises(WorkerLoadError, match=r"ASR_OFFLINE_MODEL.*not an offline"):
        resolve_model(str(tiny_streaming_model), "/nonexistent", Role.OFFLINE)


@pytest.mark.anyio
async def test_an_offline_pool_gathers_utterances_ending_together(
    tiny_offline_model: Path,
) -> None:
    settings = PoolSettings(
        model=str(tiny_offline_model),
        kind=Role.OFFLINE,
        devices=("cpu",),
        batch_wait_s=0.3,
        chunk_deadline_s=10.0,
    )
    clips = [clip(20 + s, 1.0) for s in range(3)]
    async with WorkerPool(settings) as pool:
        assert pool.engine == "paraformer-offline"
        texts: list[str] = [""] * 3

        async def one(index: int) -> None:
            texts[index] = await pool.transcribe(clips[index])

        with within(30):
            async with anyio.create_task_group() as group:
                for index in range(3):
                    group.start_soon(one, index)
    model = load_automodel(str(tiny_offline_model), "cpu", 1)
    batched = model.generate(input=[to_float(c) for c in clips], batch_size=3, disable_pbar=True)
    assert texts == [r["text"] for r in batched]


@pytest.fixture(scope="module")
def numerals_model(model_cache: Path) -> Path:
    """A tiny offline Paraformer whose vocabulary is spoken Chinese numbers alone: it
    decodes (random) numbers, which ITN writes as digits."""
    target = model_cache / "synthetic-offline-tiny-seed3-numerals"
    if (target / "model.pt").is_file():
        return target
    return build_model_dir(target, "offline", "tiny", seed=3, vocabulary=NUMERALS)


def test_itn_is_wetexts_on_funasrs_own_text_where_the_stream_asks(numerals_model: Path) -> None:
    """A random-weight model decodes random characters: what ITN must give is
    WeTextProcessing's ITN of funasr's own text for the same audio, and the model's
    vocabulary of numbers makes that differ from the text. A stream that does not ask
    keeps funasr's text."""
    from wetext import Normalizer

    normalizer = Normalizer(lang="zh", operator="itn")
    engine = ParaformerOfflineEngine.load(
        EngineSpec("paraformer-offline", model_dir=str(numerals_model))
    )
    model = load_automodel(str(numerals_model), "cpu", 1)
    changed = 0
    for seed in range(8):
        audio = clip(40 + seed, 2.0)
        raw = model.generate(input=to_float(audio), disable_pbar=True)[0]["text"]
        engine.open_stream(1, StreamOptions(itn=True))
        engine.open_stream(2, StreamOptions(itn=False))
        with_itn, without = engine.feed(
            [ChunkItem(1, 0, audio, True), ChunkItem(2, 0, audio, True)]
        )
        assert without.text == raw
        assert with_itn.text == normalizer.normalize(raw)
        changed += with_itn.text != raw
    assert changed, "no clip's text had anything to normalize: the check proves nothing"
