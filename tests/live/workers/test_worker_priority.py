"""The offline pool's workers run at a lower priority than the streaming pool's; each
pool's runtime."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from workers.pool import WorkerPool

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
    settings = PoolSettings(model="checksum", devices=("cpu", "cpu"), worker_nice=7)
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


def test_asr_offline_nice_sets_the_offline_pools_nice_value() -> None:
    env = {"ASR_MODEL": "checksum", "ASR_OFFLINE_MODEL": "checksum"}
    offline = GatewaySettings.from_env(env).companions.get(Role.OFFLINE)
    assert offline is not None
    assert offline.worker_nice == 0
    assert GatewaySettings.from_env(env).pool.worker_nice == 0
    tuned = GatewaySettings.from_env({**env, "ASR_OFFLINE_NICE": "3"}).companions.get(Role.OFFLINE)
    assert tuned is not None
    assert tuned.worker_nice == 3
    with pytest.raises(ValueError, match="ASR_OFFLINE_NICE"):
        GatewaySettings.from_env({**env, "ASR_OFFLINE_NICE": "20"})


def test_the_offline_and_vad_pools_follow_asr_runtime_unless_told_otherwise() -> None:
    env = {"ASR_MODEL": "checksum", "ASR_OFFLINE_MODEL": "checksum", "ASR_VAD_MODEL": "x"}
    onnx = GatewaySettings.from_env({**env, "ASR_RUNTIME": "onnx"}).companions
    assert (onnx[Role.OFFLINE].runtime, onnx[Role.VAD].runtime) == ("onnx", "onnx")
    old_names = {**env, "ASR_ENGINE": "paraformer-onnx", "ASR_OFFLINE_ENGINE": "paraformer"}
    mixed = GatewaySettings.from_env(old_names).companions
    assert (mixed[Role.OFFLINE].runtime, mixed[Role.VAD].runtime) == ("torch", "onnx")
