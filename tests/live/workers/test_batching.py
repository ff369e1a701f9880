"""The worker's batch policy, and the ONNX engines behind the pool."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import numpy as np
import pytest

from shared.engines import Precision, Runtime
from shared.messages import EngineSpec, StreamResult
from shared.settings import PoolSettings
from tests.helpers.paraformer_onnx import (
    NO_LOOK_BACK,
    NO_OPENVINO,
    one_stream,
    pieces,
    speech_like,
)
from tests.helpers.timing import within
from workers.engines import load_engine
from workers.engines.paraformer.streaming_onnx import ParaformerOnnxEngine
from workers.engines.runtime.onnx_files import up_to_date
from workers.pool import WorkerPool
from workers.pool.stream import AudioStream

pytestmark = pytest.mark.anyio

CHUNK = np.arange(9600, dtype=np.int16)


def checksum_pool(**overrides: object) -> WorkerPool:
    settings = PoolSettings(model="checksum", devices=("cpu",), **overrides)  # type: ignore[arg-type]
    return WorkerPool(settings)


async def test_a_step_is_held_open_for_more_streams() -> None:
    # One slot: each send waits until the worker has taken the chunk before it out of the
    # slab, so the others are sent only once the first chunk is in the worker, waiting.
    async with checksum_pool(
        batch_hold="wait", batch_wait_s=1.0, chunk_deadline_s=5.0, slots_per_worker=1
    ) as pool:
        streams = [pool.open_stream() for _ in range(4)]
        with within(5):
            for stream in streams:
                await stream.send(CHUNK)
            results = [await stream.receive() for stream in streams]
        assert [r.batch_size for r in results] == [4, 4, 4, 4]
        for stream in streams:
            await stream.aclose()


async def test_without_a_wait_a_lone_chunk_goes_alone() -> None:
    async with checksum_pool() as pool:
        streams = [pool.open_stream() for _ in range(2)]
        await streams[0].send(CHUNK)
        with within(5):
            first = await streams[0].receive()
        await streams[1].send(CHUNK)
        with within(5):
            await streams[1].receive()
        assert first.batch_size == 1
        for stream in streams:
            await stream.aclose()


# A step held for the whole wait would answer in LONG_WAIT_S: far past the fail_after of
# the tests below, which only bounds a hang. How soon they answer is bench.load.batching's.
LONG_WAIT_S = 60.0


async def lone_result(stream: AudioStream, final: bool) -> StreamResult:
    with within(LONG_WAIT_S / 6):
        if final:
            await stream.finish(CHUNK)
        else:
            await stream.send(CHUNK)
        return await stream.receive()


async def test_the_wait_never_passes_the_chunk_deadline() -> None:
    async with checksum_pool(
        batch_hold="wait", batch_wait_s=LONG_WAIT_S, chunk_deadline_s=0.2
    ) as pool:
        async with pool.open_stream() as stream:
            result = await lone_result(stream, final=False)  # the deadline, not the wait
        assert result.batch_size == 1
        assert not result.is_final


async def test_a_final_chunk_is_never_held() -> None:
    async with checksum_pool(
        batch_hold="wait", batch_wait_s=LONG_WAIT_S, chunk_deadline_s=2 * LONG_WAIT_S
    ) as pool:
        async with pool.open_stream() as stream:
            result = await lone_result(stream, final=True)
        assert result.is_final


@pytest.mark.slow
@pytest.mark.parametrize(
    ("runtime", "precision"),
    [
        ("onnx", "fp32"),
        pytest.param("openvino", "int8", marks=NO_OPENVINO),  # QDQ graphs
    ],
)
async def test_the_pool_exports_once_and_serves_batched_onnx_streams(
    tmp_path: Path, tiny_streaming_model: Path, runtime: Runtime, precision: Precision
) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_streaming_model, model, ignore=shutil.ignore_patterns("onnx-gateway"))
    settings = PoolSettings(
        model=str(model),
        devices=("cpu",),
        runtime=runtime,
        onnx_precision=precision,
        batch_wait_s=0.2,
    )
    audios = [speech_like(200 + s, chunks=3 + s, extra=500 * s) for s in range(4)]
    options = NO_LOOK_BACK
    texts: list[list[str]] = [[] for _ in audios]
    batch_sizes: list[int] = []

    async def run(index: int, stream: AudioStream) -> None:
        async def collect() -> None:
            async for result in stream:
                texts[index].append(result.text)
                batch_sizes.append(result.batch_size)

        async with stream, anyio.create_task_group() as group:
            group.start_soon(collect)
            cut = pieces(audios[index])
            for k, piece in enumerate(cut):
                if k == len(cut) - 1:
                    await stream.finish(piece)
                else:
                    await stream.send(piece)

    async with WorkerPool(settings) as pool:  # start-up runs the export, in a child
        assert up_to_date(model, precision, qdq=runtime == "openvino")
        assert pool.engine == f"paraformer-{runtime}"
        with within(60):
            async with anyio.create_task_group() as group:
                for index in range(len(audios)):
                    group.start_soon(run, index, pool.open_stream(options))
    spec = EngineSpec(f"paraformer-{runtime}", model_dir=str(model), precision=precision)
    engine = load_engine(spec)
    assert isinstance(engine, ParaformerOnnxEngine)
    alone = [one_stream(engine, audio, s) for s, audio in enumerate(audios)]
    assert texts == alone
    assert max(batch_sizes) > 1  # the streams shared steps
