"""What a worker's device label (``cpu``, ``cuda:N``) means for its process.

Each worker sees only its own GPU: the parent spawns it with ``CUDA_VISIBLE_DEVICES`` naming
that one device, and the worker loads its engine on ``cuda:0``, the only device it can see.
A library call that uses "the current device" (``torch.cuda.set_device`` never made,
cuDNN's handles, an ONNX Runtime session's default stream) then cannot touch another GPU,
and a worker on ``cuda:1`` never creates a context on GPU 0. The label stays ``cuda:N``
everywhere the operator reads it (``/readyz``, logs, metrics).

``N`` counts the GPUs the gateway itself sees: where the gateway runs under
``CUDA_VISIBLE_DEVICES=2,3``, ``cuda:1`` is the gateway's second GPU, physical GPU 3 (or the
UUID listed second). ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (unless set) makes ``N`` count as
``nvidia-smi`` does; CUDA's own default order puts the fastest GPU first. A CPU worker is
spawned with no GPU visible at all: it cannot hold a CUDA context on GPU 0 by accident.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

VISIBLE = "CUDA_VISIBLE_DEVICES"
ORDER = "CUDA_DEVICE_ORDER"


def gpu_index(label: str) -> int | None:
    """``N`` of ``cuda:N`` (``cuda`` alone is ``cuda:0``); ``None`` for the CPU."""
    if label == "cpu":
        return None
    kind, _, index = label.partition(":")
    if kind != "cuda" or not (index == "" or index.isdigit()):
        raise ValueError(f"device {label!r} is neither cpu nor cuda:N")
    return int(index or 0)


def local_device(label: str) -> str:
    """The device a worker spawned for ``label`` loads its engine on: ``cuda:0``, the one
    GPU it sees, for any ``cuda:N``."""
    return "cpu" if gpu_index(label) is None else "cuda:0"


def worker_environment(label: str, parent: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a worker for ``label`` is spawned with, over the parent's
    environment ``parent`` (``os.environ`` by default).

    Raises ``ValueError`` where ``cuda:N`` is not among the GPUs the parent's
    ``CUDA_VISIBLE_DEVICES`` leaves it.
    """
    env = os.environ if parent is None else parent
    index = gpu_index(label)
    if index is None:
        return {VISIBLE: ""}
    physical = str(index)
    if VISIBLE in env:
        visible = [entry.strip() for entry in env[VISIBLE].split(",") if entry.strip()]
        if index >= len(visible):
            raise ValueError(
                f"device {label}: the gateway sees {len(visible)} GPU(s)"
                f" ({VISIBLE}={env[VISIBLE]!r})"
            )
        physical = visible[index]
    return {VISIBLE: physical, ORDER: env.get(ORDER, "PCI_BUS_ID")}


def enter_environment(variables: Mapping[str, str]) -> None:
    """Make ``variables`` this process's, before anything could initialise CUDA (CUDA reads
    ``CUDA_VISIBLE_DEVICES`` once, when a library first initialises it)."""
    os.environ.update(variables)
