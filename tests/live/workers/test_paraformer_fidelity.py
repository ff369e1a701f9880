"""The paraformer engine through the pool returns exactly what funasr returns directly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from shared.messages import StreamOptions
from shared.settings import PoolSettings
from tests.helpers.timing import within
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.pool import WorkerPool

pytestmark = pytest.mark.anyio

OPTION_SETS = [
    StreamOptions(chunk_size=(0, 10, 5), encoder_chunk_look_back=4, decoder_chunk_look_back=1),
    StreamOptions(chunk_size=(5, 10, 5), encoder_chunk_look_back=0, decoder_chunk_look_back=0),
    StreamOptions(chunk_size=(0, 8, 4), encoder_chunk_look_back=2, decoder_chunk_look_back=0),
]


def _speechlike(seconds: float, seed: int) -> np.ndarray[Any, np.dtype[np.int16]]:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    tone = np.sin(2 * np.pi * (150 + 100 * np.sin(2 * np.pi * 0.5 * t)) * t)
    return (tone * 8000 + rng.normal(0, 1500, t.size)).astype(np.int16)


def _direct_texts(
    model: Any, chunks: list[np.ndarray[Any, Any]], options: StreamOptions
) -> list[str]:
    cache: dict[str, Any] = {}
    texts = []
    for i, chunk in enumerate(chunks):
        result = model.generate(
            input=to_float(chunk),
            cache=cache,
            is_final=i == len(chunks) - 1,
            chunk_size=list(options.chunk_size),
            encoder_chunk_look_back=options.encoder_chunk_look_back,
            decoder_chunk_look_back=options.decoder_chunk_look_back,
            disable_pbar=True,
        )
        texts.append(result[0]["text"] if result else "")
    return texts


@pytest.fixture(scope="module")
def model(tiny_streaming_model: Path) -> Any:
    return load_automodel(str(tiny_streaming_model), "cpu", threads=1)


@pytest.fixture(scope="module")
async def pool(tiny_streaming_model: Path) -> AsyncIterator[WorkerPool]:
    """One pool for the module: its workers' start (funasr's import) is most of a test."""
    settings = PoolSettings(model=str(tiny_streaming_model), devices=("cpu",))
    async with WorkerPool(settings) as pool:
        yield pool


async def test_pool_texts_equal_direct_generate(model: Any, pool: WorkerPool) -> None:
    for seed, options in enumerate(OPTION_SETS):
        audio = _speechlike(4.3, seed)
        step = options.chunk_samples
        chunks = [audio[i : i + step] for i in range(0, len(audio), step)]
        expected = _direct_texts(model, chunks, options)
        got: list[str] = []
        with within(60):
            async with pool.open_stream(options) as stream:

                async def read(stream: Any = stream, got: list[str] = got) -> None:
                    async for result in stream:
                        got.append(result.text)

                async with anyio.create_task_group() as group:
                    group.start_soon(read)
                    for chunk in chunks[:-1]:
                        await stream.send(chunk)
                    await stream.finish(chunks[-1])
        assert got == expected
        assert "".join(expected), "the tiny model should emit tokens (predictor tuned)"


async def test_transcribe_joins_the_deltas(model: Any, pool: WorkerPool) -> None:
    audio = _speechlike(2.0, 7)
    options = StreamOptions()
    chunks = [audio[i : i + options.chunk_samples] for i in range(0, len(audio), 9600)]
    expected = "".join(_direct_texts(model, chunks, options))
    with within(60):
        assert await pool.transcribe(audio, options) == expected
