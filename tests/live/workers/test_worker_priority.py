"""The offline pool's workers run at a lower priority than the streaming pool's, but for
those kept at nice 0 for urgent streams, which serve those; each pool's runtime."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from workers.pool import Urgency, WorkerPool

pytestmark = pytest.mark.anyio


def niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])


def autogroup_nice(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except OSError:
        return None


async def test_a_pools_workers_run_at_its_nice_value_and_so_does_their_session() -> None:
    own = os.nice(0)
    settings = PoolSettings(
        model="checksum", devices=("cpu", "cpu"), worker_nice=7, urgent_workers=0
    )
    async with WorkerPool(settings) as pool:
        for worker in pool.status():
            assert worker.pid is not None
            assert niceness(worker.pid) == own + 7
            group = autogroup_nice(worker.pid)
            assert group is None or group == 7  # where the kernel has autogroups


async def test_workers_run_at_the_gateways_priority_by_default() -> None:
    own = os.nice(0)
    async with WorkerPool(PoolSettings(model="checksum", devices=("cpu",))) as pool:
        (worker,) = pool.status()
        assert worker.pid is not None
        assert niceness(worker.pid) == own


async def test_an_urgent_stream_is_served_at_nice_0_while_background_ones_run_niced() -> None:
    own = os.nice(0)
    settings = PoolSettings(model="checksum", devices=("cpu",) * 3, worker_nice=7)
    async with WorkerPool(settings) as pool:
        pids = [worker.pid for worker in pool.status()]
        assert [(w.nice, w.urgent) for w in pool.status()] == [(0, True), (7, False), (7, False)]
        # Background streams take the niced workers, the idle nice-0 one left alone ...
        background = [pool.open_stream() for _ in range(4)]
        for stream in background:
            await stream.send(bytes(1920))
            await stream.receive()  # decoded: the worker is serving it
        assert {stream.worker_index for stream in background} == {1, 2}
        # ... and an urgent one, while they are open, goes to it.
        async with pool.open_stream(urgency=Urgency.URGENT) as urgent:
            await urgent.finish(bytes(1920))
            async for result in urgent:
                assert result.is_final
        assert urgent.worker_index == 0
        served_at = {index: niceness(pid) for index, pid in enumerate(pids) if pid is not None}
        assert served_at == {0: own, 1: own + 7, 2: own + 7}
        for stream in background:
            await stream.aclose()


def test_asr_offline_nice_sets_the_offline_pools_nice_value() -> None:
    env = {"ASR_MODEL": "checksum", "ASR_OFFLINE_MODEL": "checksum"}
    offline = GatewaySettings.from_env(env).companions.get(Role.OFFLINE)
    assert offline is not None
    assert offline.worker_nice == 0
    assert GatewaySettings.from_env(env).pool.worker_nice == 0
    tuned = GatewaySettings.from_env({**env, "ASR_OFFLINE_NICE": "3"}).companions.get(Role.OFFLINE)
    assert tuned is not None
    assert (tuned.worker_nice, tuned.urgent_workers) == (3, 1)  # one kept at 0 by default
    with pytest.raises(ValueError, match="ASR_OFFLINE_NICE"):
        GatewaySettings.from_env({**env, "ASR_OFFLINE_NICE": "20"})


def test_the_offline_and_vad_pools_follow_asr_runtime_unless_told_otherwise() -> None:
    env = {"ASR_MODEL": "checksum", "ASR_OFFLINE_MODEL": "checksum", "ASR_VAD_MODEL": "x"}
    onnx = GatewaySettings.from_env({**env, "ASR_RUNTIME": "onnx"}).companions
    assert (onnx[Role.OFFLINE].runtime, onnx[Role.VAD].runtime) == ("onnx", "onnx")
    old_names = {**env, "ASR_ENGINE": "paraformer-onnx", "ASR_OFFLINE_ENGINE": "paraformer"}
    mixed = GatewaySettings.from_env(old_names).companions
    assert (mixed[Role.OFFLINE].runtime, mixed[Role.VAD].runtime) == ("torch", "onnx")
