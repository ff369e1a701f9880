"""A GPU worker's warm-up (workers.worker.warm_up), through the engine's own interface."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.checksum.engine import ChecksumEngine
from workers.worker.warm_up import WARM_UP_SAMPLES, WARM_UP_STREAM, WarmUpBroke, warm_up


class _Recording(ChecksumEngine):
    def __init__(self, error: Exception | None = None) -> None:
        super().__init__()
        self.error = error
        self.fed: list[ChunkItem] = []

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        self.fed.extend(items)
        if self.error is not None:
            raise self.error
        return super().feed(items)


def test_one_final_second_of_silence_goes_through_and_leaves_no_stream() -> None:
    engine = _Recording()
    warm_up(engine)
    (item,) = engine.fed
    assert (item.stream_id, item.seq, item.final) == (WARM_UP_STREAM, 0, True)
    assert len(item.samples) == WARM_UP_SAMPLES
    assert not item.samples.any()
    assert engine.active_streams == 0


def test_an_engine_that_refuses_silence_still_serves(caplog: pytest.LogCaptureFixture) -> None:
    engine = _Recording(ValueError("no speech in the audio"))
    warm_up(engine)
    assert engine.active_streams == 0
    assert "the warm-up failed (no speech in the audio); serving anyway" in caplog.text


def test_a_warm_up_that_breaks_the_gpu_fails_the_load() -> None:
    engine = _Recording(RuntimeError("CUDA error: unspecified launch failure"))
    with pytest.raises(WarmUpBroke, match="CUDA error 719: unspecified launch failure"):
        warm_up(engine)
    assert engine.active_streams == 0
