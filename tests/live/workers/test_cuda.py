"""Workers asked for a GPU serve on it, or refuse to start in one line: real pools, real
engines. The GPU cases run only where CUDA is (``bench/device/check.sh`` runs this file
there); the refusals run where it is not.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from shared.errors import WorkerLoadError
from shared.settings import PoolSettings
from tests.helpers.timing import within
from workers.pool import WorkerPool, WorkerStatus

pytestmark = pytest.mark.anyio

has_cuda = torch.cuda.is_available()
ort_has_cuda = "CUDAExecutionProvider" in ort.get_available_providers()
needs_cuda = pytest.mark.skipif(not has_cuda, reason="CUDA is not available")
needs_ort_cuda = pytest.mark.skipif(
    not (has_cuda and ort_has_cuda), reason="no GPU, or onnxruntime without CUDA"
)


def _audio() -> np.ndarray:
    return np.random.default_rng(0).normal(0, 3000, 16000 * 2).astype(np.int16)


async def _transcribe(settings: PoolSettings) -> tuple[str, list[WorkerStatus]]:
    async with WorkerPool(settings) as pool:
        with within(180):
            text = await pool.transcribe(_audio())
        return text, list(pool.status())


@needs_cuda
async def test_pytorch_workers_serve_on_their_gpus_and_say_so(tiny_streaming_model: Path) -> None:
    devices = tuple(f"cuda:{i}" for i in range(torch.cuda.device_count()))
    settings = PoolSettings(model=str(tiny_streaming_model), devices=devices, runtime="torch")
    text, workers = await _transcribe(settings)
    assert text
    assert [w.device for w in workers] == list(devices)
    assert {w.provider for w in workers} == {"torch-cuda"}
    # Each worker's own figure, from the driver (a context alone is hundreds of MiB).
    assert all((w.gpu_memory_bytes or 0) > 50 * 2**20 for w in workers)


@needs_ort_cuda
async def test_onnx_workers_serve_on_the_gpu_with_the_cpus_text(tiny_streaming_model: Path) -> None:
    on_gpu = PoolSettings(model=str(tiny_streaming_model), devices=("cuda:0",), runtime="onnx")
    gpu_text, workers = await _transcribe(on_gpu)
    assert [w.provider for w in workers] == ["CUDAExecutionProvider"]
    cpu_text, _ = await _transcribe(replace(on_gpu, devices=("cpu",)))
    assert gpu_text == cpu_text  # fp32, TF32 off: the same text


@pytest.mark.skipif(has_cuda, reason="checks the refusal without CUDA")
async def test_pytorch_on_a_missing_gpu_fails_loudly(tiny_streaming_model: Path) -> None:
    settings = PoolSettings(model=str(tiny_streaming_model), devices=("cuda:0",), runtime="torch")
    with within(120), pytest.raises(WorkerLoadError, match="CUDA is not available"):
        async with WorkerPool(settings):
            pass


@pytest.mark.skipif(ort_has_cuda, reason="checks the refusal of onnxruntime's CPU build")
async def test_onnx_on_the_cpu_build_refuses_the_gpu_in_one_line(
    tiny_streaming_model: Path,
) -> None:
    """Refused by the pool before the export (a large model's takes minutes, in vain), in
    its words, not a worker's."""
    settings = PoolSettings(model=str(tiny_streaming_model), devices=("cuda:0",), runtime="onnx")
    with within(30), pytest.raises(WorkerLoadError) as refused:
        async with WorkerPool(settings):
            pass
    assert str(refused.value) == (
        f"paraformer-onnx: cuda:0 requested, but onnxruntime {ort.__version__} has no"
        " CUDAExecutionProvider: pip install 'asr-gateway[gpu]' (onnxruntime-gpu) in place of"
        " [cpu]"
    )
