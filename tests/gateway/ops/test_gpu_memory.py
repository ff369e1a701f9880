"""Workers' GPU memory from nvidia-smi: parsed, asked at most once per refresh, and nothing
(not an old figure) when the driver does not answer."""

from __future__ import annotations

import subprocess

import pytest

from gateway.ops.gpu_memory import MIB, REFRESH_S, GpuMemory, parse_compute_apps

pytestmark = pytest.mark.anyio


def test_compute_apps_become_bytes_by_pid() -> None:
    output = "4242, 1530\n4243, 812\n4242, 20\n[Not Supported], x\n"
    assert parse_compute_apps(output) == {4242: 1550 * MIB, 4243: 812 * MIB}


async def test_a_scrape_storm_asks_the_driver_once_per_refresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[list[str]] = []

    def run(command: list[str]) -> str:
        asked.append(command)
        return "7, 100\n"

    now = [1000.0]
    monkeypatch.setattr("gateway.ops.gpu_memory.anyio.current_time", lambda: now[0])
    gpus = GpuMemory(run, executable="/usr/bin/nvidia-smi")
    for _ in range(50):
        assert await gpus.refresh() == {7: 100 * MIB}
    assert len(asked) == 1
    assert asked[0][0] == "/usr/bin/nvidia-smi"
    now[0] += REFRESH_S
    await gpus.refresh()
    assert len(asked) == 2


async def test_a_driver_that_fails_gives_no_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter(["7, 100\n"])

    def run(command: list[str]) -> str:
        try:
            return next(answers)
        except StopIteration:
            raise subprocess.TimeoutExpired(command, 2.0) from None

    now = [0.0]
    monkeypatch.setattr("gateway.ops.gpu_memory.anyio.current_time", lambda: now[0])
    gpus = GpuMemory(run, executable="nvidia-smi")
    assert await gpus.refresh() == {7: 100 * MIB}
    now[0] += REFRESH_S
    assert await gpus.refresh() == {}


async def test_without_nvidia_smi_nothing_is_asked() -> None:
    def run(command: list[str]) -> str:
        raise AssertionError("asked")

    gpus = GpuMemory(run, executable=None)
    gpus._executable = None  # as on a machine without the NVIDIA driver
    assert await gpus.refresh() == {}
