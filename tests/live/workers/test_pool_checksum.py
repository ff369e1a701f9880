"""The checksum engine through real spawned workers: nothing lost, duplicated or reordered."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from bench.common.audio import expected_checksum
from shared.errors import StreamClosedError, WorkerError
from shared.settings import PoolSettings, Transport
from tests.helpers.timing import within
from workers.pool import WorkerPool
from workers.pool.stream import AudioStream

pytestmark = pytest.mark.anyio

STREAMS = 50


def _settings(transport: Transport, **overrides: object) -> PoolSettings:
    base: dict[str, object] = {
        "model": "checksum",
        "devices": ("cpu", "cpu"),
        "transport": transport,
        # Small slots so that chunks straddle slot boundaries and the pool runs out of
        # slots now and then: the backpressure path is exercised too.
        "slot_bytes": 1000,
        "slots_per_worker": 8,
        "stream_window": 4,
    }
    base.update(overrides)
    return PoolSettings(**base)  # type: ignore[arg-type]


async def _stream_and_verify(stream: AudioStream, rng: np.random.Generator) -> None:
    audio = rng.integers(-32768, 32767, size=int(rng.integers(1, 40000)), dtype=np.int16)
    finals: list[str] = []
    partials: list[str] = []

    async def read() -> None:
        async for result in stream:
            (finals if result.is_final else partials).append(result.text)

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        position = 0
        while position < len(audio):
            # Chunk lengths in samples that are not slot-aligned (a slot holds 500).
            size = int(rng.integers(1, 1700))
            await stream.send(audio[position : position + size])
            position += size
        await stream.finish()
    assert finals == [expected_checksum(audio)]
    counts = [int(text.split(":")[0]) for text in partials]
    assert counts == sorted(counts)


@pytest.mark.parametrize("transport", ["shm", "queue"])
async def test_fifty_concurrent_streams_verify(transport: Transport) -> None:
    async with WorkerPool(_settings(transport)) as pool:
        with within(60):
            async with anyio.create_task_group() as group:
                for seed in range(STREAMS):

                    async def run(seed: int = seed) -> None:
                        async with pool.open_stream() as stream:
                            await _stream_and_verify(stream, np.random.default_rng(seed))

                    group.start_soon(run)
        status = pool.status()
        assert [w.active_streams for w in status] == [0, 0]
        assert [w.free_slots for w in status] == [8, 8]


async def test_streams_bind_to_the_least_loaded_worker() -> None:
    async with WorkerPool(_settings("shm")) as pool:
        streams = [pool.open_stream() for _ in range(4)]
        assert sorted(s.worker_index for s in streams) == [0, 0, 1, 1]
        await streams[0].aclose()
        await streams[2].aclose()
        # Worker of stream 1 and 3 each still has one; the next goes to either.
        fifth = pool.open_stream()
        assert [w.active_streams for w in pool.status()] in ([2, 1], [1, 2])
        for stream in [*streams, fifth]:
            await stream.aclose()
        assert [w.active_streams for w in pool.status()] == [0, 0]


async def test_transcribe_returns_the_final_checksum() -> None:
    audio = np.arange(-5000, 5000, dtype=np.int16)
    async with WorkerPool(_settings("shm", devices=("cpu",))) as pool:
        assert await pool.transcribe(audio) == expected_checksum(audio)
        assert await pool.transcribe(b"") == "0:00000000"


async def test_sending_after_finish_is_refused() -> None:
    pool = WorkerPool(_settings("shm", devices=("cpu",)))
    async with pool, pool.open_stream() as stream:
        await stream.finish(b"\x01\x00")
        with pytest.raises(StreamClosedError, match="already finished"):
            await stream.send(b"\x01\x00")
        result = await stream.receive()
        assert result.is_final
        assert result.text == expected_checksum(np.array([1], dtype=np.int16))


async def test_odd_byte_counts_are_refused() -> None:
    pool = WorkerPool(_settings("shm", devices=("cpu",)))
    async with pool, pool.open_stream() as stream:
        with pytest.raises(ValueError, match="16-bit"):
            await stream.send(b"\x01")


async def test_idle_stream_is_dropped_and_failed() -> None:
    settings = _settings("shm", devices=("cpu",), stream_idle_timeout_s=0.2)
    pool = WorkerPool(settings)
    async with pool, pool.open_stream() as stream:
        await stream.send(np.ones(10, dtype=np.int16))
        assert not (await stream.receive()).is_final
        # The worker checks idle streams about once a second.
        with within(5), pytest.raises(WorkerError, match="idle"):
            await stream.receive()
    assert pool.status()[0].active_streams == 0
