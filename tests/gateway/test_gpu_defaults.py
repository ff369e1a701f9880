"""What the settings choose for GPUs where the operator does not (docs/workers.md, GPUs):
the batched ONNX runtime for every pool of a model served on a GPU, the VAD included
whatever device it runs on, and int8 refused on a GPU with the reason."""

from __future__ import annotations

import pytest

from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings

# The seed's layout: two GPUs, two streaming workers on each, the offline model on the
# second, the VAD (on the CPU by default).
SEED = {
    "ASR_DEVICES": "cuda:0,cuda:1",
    "ASR_WORKERS_PER_DEVICE": "2",
    "ASR_OFFLINE_MODEL": "paraformer",
    "ASR_OFFLINE_DEVICES": "cuda:1",
    "ASR_VAD_MODEL": "fsmn-vad",
}


def _pools(env: dict[str, str]) -> dict[str, PoolSettings]:
    settings = GatewaySettings.from_env(env)
    return {
        "streaming": settings.pool,
        **{role.value: pool for role, pool in settings.companions.items()},
    }


def test_a_model_on_gpus_runs_on_onnx_runtime_its_vad_too() -> None:
    pools = _pools(SEED)
    assert {name: pool.runtime for name, pool in pools.items()} == {
        "streaming": "onnx",
        Role.OFFLINE.value: "onnx",
        Role.VAD.value: "onnx",  # the vectorised FSMN-VAD, off the one PyTorch CPU worker
    }
    assert pools[Role.VAD.value].devices == ("cpu",)
    assert pools["streaming"].worker_devices == ("cuda:0", "cuda:0", "cuda:1", "cuda:1")


def test_on_cpus_the_default_stays_funasrs_pytorch() -> None:
    pools = _pools({**SEED, "ASR_DEVICES": "cpu,cpu", "ASR_OFFLINE_DEVICES": "cpu"})
    assert {pool.runtime for pool in pools.values()} == {"torch"}


@pytest.mark.parametrize(
    ("named", "runtime"),
    [
        ({"ASR_RUNTIME": "torch"}, "torch"),
        ({"ASR_ENGINE": "paraformer"}, "torch"),  # the runtime's old name
        ({"ASR_RUNTIME": "openvino"}, "openvino"),
    ],
)
def test_a_runtime_the_operator_names_is_kept(named: dict[str, str], runtime: str) -> None:
    assert _pools({**SEED, **named})["streaming"].runtime == runtime


def test_a_gpu_anywhere_among_the_devices_is_enough() -> None:
    assert _pools({"ASR_DEVICES": "cpu,cuda"})["streaming"].runtime == "onnx"
    assert _pools({"ASR_DEVICES": "cpu,cuda"})["streaming"].devices == ("cpu", "cuda:0")


def test_int8_on_a_gpu_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"ASR_ONNX_PRECISION=int8 on cuda:0: .*QLinearMatMul"):
        GatewaySettings.from_env({**SEED, "ASR_ONNX_PRECISION": "int8"})


def test_int8_stays_for_cpus_and_for_pytorch() -> None:
    cpu = _pools({"ASR_DEVICES": "cpu", "ASR_RUNTIME": "onnx", "ASR_ONNX_PRECISION": "int8"})
    assert cpu["streaming"].onnx_precision == "int8"
    torch = _pools({**SEED, "ASR_RUNTIME": "torch", "ASR_ONNX_PRECISION": "int8"})
    assert torch["streaming"].runtime == "torch"


@pytest.mark.parametrize("devices", ["cuda:x", "gpu:0", "cuda0", "cuda:1,tpu"])
def test_a_device_that_is_neither_cpu_nor_cuda_n_is_refused(devices: str) -> None:
    with pytest.raises(ValueError, match="ASR_DEVICES must be comma-separated devices"):
        GatewaySettings.from_env({"ASR_DEVICES": devices})
