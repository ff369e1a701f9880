"""Which CUDA devices this machine has, without importing torch (seconds, and a GPU context
in the gateway process): the driver's list, narrowed by ``CUDA_VISIBLE_DEVICES``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one directory per GPU the driver knows


def cuda_device_count(environ: Mapping[str, str] | None = None) -> int:
    """The devices ``cuda:N`` may name here: ``N`` from 0 to this count less one."""
    env = os.environ if environ is None else environ
    try:
        present = sum(1 for _ in NVIDIA_GPUS.iterdir())
    except OSError:
        present = 0  # no NVIDIA driver
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    # CUDA stops at the first entry that names no device ("-1" hides them all).
    count = 0
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        count += 1
    return min(count, present)


def missing_device(devices: tuple[str, ...], count: int) -> str | None:
    """The first of ``devices`` that does not exist on a machine with ``count`` CUDA
    devices, or None."""
    for device in devices:
        if device == "cpu":
            continue
        _, _, index = device.partition(":")
        number = int(index) if index.isdigit() else 0 if device == "cuda" else None
        if number is None or number >= count:
            return device
    return None
