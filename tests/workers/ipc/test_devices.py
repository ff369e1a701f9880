"""A worker's device label, and the environment it is spawned with (workers.ipc.devices)."""

from __future__ import annotations

import pytest

from workers.ipc.devices import gpu_index, local_device, worker_environment


@pytest.mark.parametrize(
    ("label", "index", "local"),
    [("cpu", None, "cpu"), ("cuda", 0, "cuda:0"), ("cuda:0", 0, "cuda:0"), ("cuda:3", 3, "cuda:0")],
)
def test_a_label_names_a_gpu_index_and_the_worker_loads_on_its_only_gpu(
    label: str, index: int | None, local: str
) -> None:
    assert gpu_index(label) == index
    assert local_device(label) == local


@pytest.mark.parametrize("label", ["gpu:0", "cuda:x", "cuda:-1", "cuda0", "CPU"])
def test_anything_else_is_refused(label: str) -> None:
    with pytest.raises(ValueError, match="neither cpu nor cuda:N"):
        gpu_index(label)


def test_a_cpu_worker_sees_no_gpu_whatever_the_gateway_sees() -> None:
    assert worker_environment("cpu", {}) == {"CUDA_VISIBLE_DEVICES": ""}
    assert worker_environment("cpu", {"CUDA_VISIBLE_DEVICES": "0,1"}) == {
        "CUDA_VISIBLE_DEVICES": ""
    }


def test_a_gpu_worker_sees_its_gpu_in_nvidia_smis_order() -> None:
    assert worker_environment("cuda:1", {}) == {
        "CUDA_VISIBLE_DEVICES": "1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def test_the_index_counts_the_gpus_the_gateway_was_given() -> None:
    parent = {"CUDA_VISIBLE_DEVICES": "2, GPU-0f1e", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    assert worker_environment("cuda:0", parent)["CUDA_VISIBLE_DEVICES"] == "2"
    assert worker_environment("cuda:1", parent) == {
        "CUDA_VISIBLE_DEVICES": "GPU-0f1e",
        "CUDA_DEVICE_ORDER": "FASTEST_FIRST",
    }


@pytest.mark.parametrize("visible", ["", "4"])
def test_a_gpu_beyond_those_the_gateway_sees_is_refused(visible: str) -> None:
    with pytest.raises(ValueError, match=r"device cuda:1: the gateway sees \d GPU"):
        worker_environment("cuda:1", {"CUDA_VISIBLE_DEVICES": visible})
