"""A worker's own GPU memory figure (workers.worker.gpu_memory), with the driver's reading
replaced where no GPU is: what the meter does with the readings is what is tested."""

from __future__ import annotations

import ctypes
import tempfile
import threading
import time
from pathlib import Path

import pytest

from workers.worker import gpu_memory
from workers.worker.gpu_memory import GpuMemoryMeter, nvml_used_bytes


class _Device:
    """A GPU's used memory, which each load on it raises by ``per_load``."""

    def __init__(self, used: int, per_load: int) -> None:
        self.used, self.per_load = used, per_load
        self.asked: list[str] = []

    def read(self, gpu: str) -> int:
        self.asked.append(gpu)
        return self.used

    def load(self) -> str:
        self.used += self.per_load
        return "engine"


def test_the_load_is_what_the_device_gained_meanwhile() -> None:
    device = _Device(used=5_000, per_load=1_200)
    meter = GpuMemoryMeter("1", device.read)
    assert meter.measure_load(device.load) == "engine"
    assert meter.at_load == 1_200
    assert meter.now() == 1_200  # no PyTorch allocator in this process
    assert device.asked == ["1", "1"]


def test_a_cpu_worker_measures_nothing() -> None:
    device = _Device(used=5_000, per_load=1_200)
    meter = GpuMemoryMeter(None, device.read)
    assert meter.measure_load(device.load) == "engine"
    assert (meter.at_load, meter.now(), device.asked) == (None, None, [])


def test_a_driver_that_cannot_be_read_gives_no_figure() -> None:
    meter = GpuMemoryMeter("0", lambda gpu: None)
    meter.measure_load(lambda: None)
    assert (meter.at_load, meter.now()) == (None, None)


def test_loads_on_one_gpu_take_turns_so_that_each_counts_only_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    device = _Device(used=0, per_load=0)
    loads = {"first": 700, "second": 300}

    def loading(name: str) -> str:
        for _ in range(5):  # the memory grows over the load, as a real one's does
            device.used += loads[name] // 5
            time.sleep(0.01)
        return name

    meters = {name: GpuMemoryMeter("GPU-0f1e", device.read) for name in loads}
    threads = [
        threading.Thread(target=meters[name].measure_load, args=(lambda n=name: loading(n),))
        for name in loads
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {name: meter.at_load for name, meter in meters.items()} == loads


@pytest.mark.parametrize("uuid", ["MIG-0f1e", "not-a-gpu"])
def test_what_nvml_cannot_name_is_not_asked(uuid: str) -> None:
    try:
        ctypes.CDLL(gpu_memory.NVML_LIBRARY)
    except OSError:
        pytest.skip("no NVIDIA driver here: nothing is asked at all")
    assert nvml_used_bytes(uuid) is None


def test_without_the_nvidia_driver_there_is_no_reading() -> None:
    try:
        ctypes.CDLL(gpu_memory.NVML_LIBRARY)
    except OSError:
        assert nvml_used_bytes("0") is None
    else:
        pytest.skip("the NVIDIA driver is here (tests/live/workers/test_cuda.py reads it)")


def test_the_meter_of_a_worker_is_the_one_gpu_it_was_spawned_to_see(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0f1e")
    assert GpuMemoryMeter.for_this_worker()._gpu == "GPU-0f1e"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert GpuMemoryMeter.for_this_worker()._gpu is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert GpuMemoryMeter.for_this_worker()._gpu is None
