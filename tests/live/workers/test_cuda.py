"""GPU paths: run only where CUDA is available, skipped cleanly elsewhere."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from shared.errors import WorkerLoadError
from shared.settings import PoolSettings
from tests.helpers.timing import within
from workers.pool import WorkerPool

pytestmark = pytest.mark.anyio

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")


@needs_cuda
async def test_paraformer_on_cuda_transcribes(tiny_streaming_model: Path) -> None:
    devices = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count()))
    settings = PoolSettings(model=str(tiny_streaming_model), devices=devices)
    audio = np.random.default_rng(0).normal(0, 3000, 16000 * 2).astype(np.int16)
    async with WorkerPool(settings) as pool:
        with within(120):
            text = await pool.transcribe(audio)
    assert text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
async def test_cuda_device_without_cuda_fails_loudly(tiny_streaming_model: Path) -> None:
    settings = PoolSettings(model=str(tiny_streaming_model), devices=("cuda:0",))
    with within(120), pytest.raises(WorkerLoadError, match="CUDA is not available"):
        async with WorkerPool(settings):
            pass
