"""Workers bound to GPUs, as real spawned processes on a machine without one: the
environment each is spawned with (its one visible GPU), and a worker whose CUDA context an
engine error broke, which quits and is replaced.

The engine is the checksum engine that fails on demand (tests.helpers.failing_engine): no
GPU is touched, but everything the pool and the worker do for a ``cuda:N`` device runs.
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from bench.common.audio import expected_checksum
from shared.errors import WorkerError, WorkerLoadError
from shared.settings import PoolSettings
from tests.helpers import failing_engine
from tests.helpers.failing_engine import BREAK_DEVICE, REPORT_PLACEMENT, marked
from tests.helpers.timing import within
from workers.pool import AudioStream, WorkerPool, WorkerStatus

pytestmark = pytest.mark.anyio


def _pool(*devices: str) -> WorkerPool:
    settings = PoolSettings(model="checksum", devices=devices)
    return WorkerPool(settings, engine_loader=failing_engine.load)


async def _reports(pool: WorkerPool, count: int) -> set[str]:
    """Each worker's placement report: ``count`` streams open at once go one per worker."""
    streams = [pool.open_stream() for _ in range(count)]
    reports = set()
    for stream in streams:
        await stream.send(marked(REPORT_PLACEMENT))
        with within(10):
            reports.add((await stream.receive()).text)
        await stream.aclose()
    return reports


async def _replaced(pool: WorkerPool, worker: WorkerStatus) -> WorkerStatus:
    """The status of the ready worker that took ``worker``'s seat (a new process)."""
    with within(20):
        while True:
            (now,) = pool.status()
            if now.state == "ready" and now.pid != worker.pid:
                return now
            await anyio.sleep(0.02)


async def test_each_worker_sees_only_its_own_gpu_and_a_cpu_worker_sees_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    async with _pool("cuda:0", "cuda:1", "cpu") as pool:
        assert [w.device for w in pool.status()] == ["cuda:0", "cuda:1", "cpu"]  # the labels
        assert await _reports(pool, 3) == {
            "cuda:0|0|PCI_BUS_ID",
            "cuda:0|1|PCI_BUS_ID",  # cuda:1 is the one GPU it sees: its cuda:0
            "cpu||-",
        }


async def test_a_gpu_label_counts_the_gpus_the_gateway_sees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,GPU-8d2e1c3a")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")  # the operator's, kept
    async with _pool("cuda:0", "cuda:1") as pool:
        assert await _reports(pool, 2) == {
            "cuda:0|5|FASTEST_FIRST",
            "cuda:0|GPU-8d2e1c3a|FASTEST_FIRST",
        }


async def test_a_gpu_the_gateway_does_not_see_fails_the_start_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(WorkerLoadError, match=r"device cuda:1: the gateway sees 1 GPU\(s\)"):
        async with _pool("cuda:1"):
            pass


async def test_a_worker_whose_gpu_broke_quits_and_is_replaced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _pool("cuda:0") as pool:
        (worker,) = pool.status()
        stream: AudioStream = pool.open_stream()
        await stream.send(marked(BREAK_DEVICE))
        with within(10), pytest.raises(WorkerError, match="illegal memory access"):
            await stream.receive()
        await stream.aclose()

        after = await _replaced(pool, worker)
        assert after.restarts == 1
        assert any(
            "quit (checksum on cuda:0: CUDA error 700: an illegal memory access was"
            " encountered; exiting to be replaced)" in record.getMessage()
            for record in caplog.records
        )
        audio = np.arange(8000, dtype=np.int16)
        with within(10):
            assert await pool.transcribe(audio) == expected_checksum(audio)


async def test_an_ordinary_engine_error_on_a_gpu_keeps_the_worker() -> None:
    """Only the errors that break the context make a worker quit: a failed step is one
    step's failure, on a GPU as on the CPU."""
    async with _pool("cuda:0") as pool:
        (worker,) = pool.status()
        stream = pool.open_stream()
        await stream.send(marked(failing_engine.FAIL_STEP))
        with within(10), pytest.raises(WorkerError, match="asked to fail this step"):
            await stream.receive()
        await stream.aclose()
        audio = np.arange(8000, dtype=np.int16)
        with within(10):
            assert await pool.transcribe(audio) == expected_checksum(audio)
        (after,) = pool.status()
        assert (after.pid, after.restarts) == (worker.pid, 0)
