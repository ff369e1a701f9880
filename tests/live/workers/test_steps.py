"""How a worker composes its steps, with a real worker: a stream with a backlog does not
make another wait behind it (the sans-I/O rules: tests/workers/worker/test_steps.py)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from shared.settings import PoolSettings
from tests.helpers.timing import within
from workers.pool import WorkerPool


@pytest.mark.anyio
async def test_a_stream_with_a_backlog_does_not_make_another_wait_behind_it() -> None:
    # Stream 0 has ten chunks waiting, stream 1 one (sent while the worker is stopped, so
    # that all of them wait together): no step holds two chunks of one stream, so the lone
    # chunk shares the first step.
    chunk = np.arange(9600, dtype=np.int16)
    settings = PoolSettings(model="checksum", devices=("cpu",))
    async with WorkerPool(settings) as pool:
        backlog, lone = pool.open_stream(), pool.open_stream()
        (worker,) = pool.status()
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            with within(10):
                for _ in range(10):
                    await backlog.send(chunk)
                await lone.send(chunk)
        finally:
            os.kill(worker.pid, signal.SIGCONT)
        with within(10):
            lone_result = await lone.receive()
            backlog_results = [await backlog.receive() for _ in range(10)]
        assert [r.seq for r in backlog_results] == list(range(10))
        assert lone_result.batch_size == 2
        assert max(r.batch_size for r in backlog_results) == 2
        await backlog.aclose()
        await lone.aclose()
