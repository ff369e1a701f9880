"""Where this worker's engine really runs, as its runtime said when it loaded: the
execution providers of its ONNX Runtime sessions (``CUDAExecutionProvider``), or PyTorch on
``torch-cuda`` / ``torch-cpu``. The worker reports it when it is ready; ``/readyz`` and the
metrics show it beside the device it was asked for. A user's engine that records nothing
reports none.
"""

from __future__ import annotations

TORCH_CUDA = "torch-cuda"
TORCH_CPU = "torch-cpu"

_providers: list[str] = []  # this process's, in the order its sessions recorded them


def record_provider(name: str) -> None:
    """Say that a model of this worker runs on ``name``."""
    if name not in _providers:
        _providers.append(name)


def provider_in_use() -> str | None:
    """What this worker's models run on, ``+``-joined where they differ (an offline torch
    model beside its ONNX punctuation); ``None`` if no runtime said."""
    return "+".join(_providers) or None


def use_torch_device(device: str) -> None:
    """Put PyTorch on ``device`` for this worker and record it: TF32 off on CUDA (its
    matmuls and convolutions change the text; fp32 is promised equal to the CPU's)."""
    if not device.startswith("cuda"):
        record_provider(TORCH_CPU)
        return
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False  # on by default for convolutions
    torch.cuda.set_device(device)
    record_provider(TORCH_CUDA)
