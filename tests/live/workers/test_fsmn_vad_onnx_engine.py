"""The ONNX FSMN-VAD engine at its edges: short and empty pieces, unknown and failing
streams, its pool, its checkpoint, and a worker with neither torch nor funasr."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shared.engines import Role
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from tests.helpers.timing import within
from tests.helpers.vad import funasr_final, funasr_vad, spoken
from workers.engines import load_engine, needs_onnx_export, select_engine
from workers.engines.base import ChunkItem
from workers.engines.kinds import kind_named
from workers.engines.paraformer.streaming import load_automodel
from workers.engines.runtime.torch_checkpoint import load_state_dict
from workers.pool import WorkerPool

Segments = tuple[tuple[int, int], ...]

# -- the engine's edges --------------------------------------------------------------------


@pytest.mark.slow
def test_short_and_empty_pieces_and_unknown_streams(tiny_vad_model: Path) -> None:
    engine = load_engine(EngineSpec(engine="fsmn-vad-onnx", model_dir=str(tiny_vad_model)))
    engine.open_stream(1, StreamOptions())
    engine.open_stream(2, StreamOptions())
    audio = spoken(1, ("speech", 0.5))
    short = ChunkItem(1, 0, audio[:500], False)  # less than a stride: it waits
    empty = ChunkItem(2, 0, audio[:0], False)
    assert [(o.decoded.segments, o.error, o.final) for o in engine.feed([short, empty])] == [
        ((), None, False),
        ((), None, False),
    ]
    (final,) = engine.feed([ChunkItem(2, 1, audio[:0], True)])  # an empty final piece
    assert (final.decoded.segments, final.error, final.final) == ((), None, True)
    assert engine.active_streams == 1
    (unknown,) = engine.feed([ChunkItem(2, 2, audio, False)])
    assert unknown.error is not None
    (last,) = engine.feed([ChunkItem(1, 1, audio[500:], True)])
    assert last.final
    assert last.error is None
    assert engine.active_streams == 0


@pytest.mark.slow
def test_a_stream_that_fails_fails_alone(tiny_vad_model: Path) -> None:
    spec = EngineSpec(engine="fsmn-vad-onnx", model_dir=str(tiny_vad_model))
    audio = spoken(2, ("quiet", 0.3), ("speech", 1.0), ("quiet", 1.0))
    alone = load_engine(spec)
    alone.open_stream(1, StreamOptions())
    expected = [o.decoded.segments for o in alone.feed([ChunkItem(1, 0, audio[:8000], False)])]
    expected += [o.decoded.segments for o in alone.feed([ChunkItem(1, 1, audio[8000:], True)])]
    engine = load_engine(spec)
    engine.open_stream(1, StreamOptions())
    engine.open_stream(2, StreamOptions())
    not_mono = np.zeros((2, 960), np.int16)  # samples the frontend cannot take
    outputs = engine.feed(
        [
            ChunkItem(1, 0, audio[:8000], False),
            ChunkItem(2, 0, audio[:8000], False),
            ChunkItem(2, 1, not_mono, False),
            ChunkItem(2, 2, audio[8000:], False),
        ]
    )
    assert [o.error is None for o in outputs] == [True, True, False, False]
    assert outputs[2].error is not None
    assert outputs[2].error.startswith("engine error: ValueError")
    assert outputs[1].decoded.segments == outputs[0].decoded.segments  # its good piece was answered
    (last,) = engine.feed([ChunkItem(1, 1, audio[8000:], True)])
    assert [outputs[0].decoded.segments, last.decoded.segments] == expected
    assert any(expected)
    assert engine.active_streams == 0


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_vad_pool_on_the_onnx_runtime_runs_this_engine(tiny_vad_model: Path) -> None:
    """Through a real worker: ``ASR_ENGINE=paraformer-onnx`` puts the VAD pool on this
    engine, and its events over a stream are funasr's (the pool cuts the pieces)."""
    import anyio

    audio = spoken(4, ("quiet", 0.4), ("speech", 1.2), ("quiet", 1.2), ("speech", 0.8))
    reference = load_automodel(str(tiny_vad_model), "cpu", 1)
    cache: dict[str, Any] = {}
    # However a stream is cut into pieces, its events are the same, if its last piece
    # holds audio (funasr ignores an empty one, final or not).
    expected = funasr_vad(reference, audio[:-960], cache)
    expected += funasr_final(reference, audio[-960:], cache)
    settings = PoolSettings(
        model=str(tiny_vad_model), kind=Role.VAD, runtime="onnx", devices=("cpu",)
    )
    found: list[list[int]] = []
    async with WorkerPool(settings) as pool:
        assert pool.engine == "fsmn-vad-onnx"
        async with pool.open_stream() as stream:

            async def read() -> None:
                async for result in stream:
                    found.extend([beg, end] for beg, end in result.decoded.segments)

            with within(60):
                async with anyio.create_task_group() as group:
                    group.start_soon(read)
                    await stream.finish(audio.tobytes())
    assert found == expected
    assert len(found) >= 3


def test_the_paraformer_onnx_runtime_puts_the_vad_on_this_engine() -> None:
    vad = kind_named("fsmn-vad")
    assert vad is not None
    assert select_engine(vad, "onnx") == "fsmn-vad-onnx"
    assert select_engine(vad, "torch") == "fsmn-vad"
    assert not needs_onnx_export("fsmn-vad-onnx")  # the graph is built at load


@pytest.mark.slow
def test_the_checkpoint_reads_as_torch_reads_it(tiny_vad_model: Path, tmp_path: Path) -> None:
    import torch

    ours = load_state_dict(tiny_vad_model / "model.pt")
    theirs = torch.load(tiny_vad_model / "model.pt", weights_only=True)
    assert list(ours) == list(theirs)
    for name, tensor in theirs.items():
        np.testing.assert_array_equal(ours[name], tensor.numpy())
    wrapped = tmp_path / "wrapped.pt"  # as funasr's loader: a "state_dict" inside
    torch.save({"state_dict": {"w": torch.arange(6.0).reshape(2, 3).t()}}, wrapped)
    np.testing.assert_array_equal(load_state_dict(wrapped)["w"], np.arange(6.0).reshape(2, 3).T)
    hostile = tmp_path / "hostile.pt"
    torch.save({"w": torch.zeros(1), "f": print}, hostile)
    with pytest.raises(pickle.UnpicklingError, match=r"print is not part of a state dict"):
        load_state_dict(hostile)


@pytest.mark.slow
def test_a_vad_worker_imports_neither_torch_nor_funasr(tiny_vad_model: Path) -> None:
    code = (
        "import sys\n"
        "from workers.engines import load_engine\n"
        "from shared.messages import EngineSpec\n"
        f"load_engine(EngineSpec('fsmn-vad-onnx', model_dir={str(tiny_vad_model)!r}))\n"
        "print('torch' in sys.modules, 'funasr' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.split() == ["False", "False"]
