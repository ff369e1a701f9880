"""Where the gateway's workers really run: the provider each one reports in ``/readyz``
(what its runtime said it runs on), its GPU memory (its own figure, else nvidia-smi's by
pid) and resident memory; and nvidia-smi's utilization while streams run.

A worker asked for a GPU that runs on the CPU (onnxruntime falls back to the CPU with a
line in its log only) is a failure, never a GPU figure: ``provider_verdict``.
"""

from __future__ import annotations

import subprocess
import threading
from typing import Any

from bench.common import procfs

# What a worker of each runtime reports when it runs where it was asked: on a GPU, and on
# the CPU (which only the dry run accepts, standing in for the GPU).
ON_GPU = {
    "onnx": frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider"}),
    "torch": frozenset({"torch-cuda"}),
}
ON_CPU = {"onnx": frozenset({"CPUExecutionProvider"}), "torch": frozenset({"torch-cpu"})}
STAND_IN = "dry run: CPU stands in for the GPU"


def provider_verdict(
    device: str, runtime: str, provider: str | None, dry_run: bool
) -> tuple[bool | None, str]:
    """Whether a worker asked for ``device`` and ``runtime`` runs as asked, by the provider
    it reports (``+``-joined where its models differ): on a GPU, every part one of that
    runtime's CUDA providers (ONNX Runtime on its CPU provider, or the ONNX runtime
    replaced by PyTorch's, is a fallback: a failure). On the CPU only in the dry run,
    where the CPU stands in for the GPU, and the text says so. None where it reports none
    (an older gateway, or an engine that does not say): then the device it was given and
    nvidia-smi are all there is."""
    if provider is None:
        return None, "no provider reported"
    parts = set(provider.split("+"))
    if device.startswith("cuda"):
        if parts <= ON_GPU.get(runtime, frozenset()):
            return True, provider
        return False, f"asked for {runtime} on {device}, runs on {provider}"
    if dry_run and parts <= ON_CPU.get(runtime, frozenset()):
        return True, f"{provider} ({STAND_IN})"
    return False, f"{provider} on {device}: not a GPU, and this is not a dry run"


def nvidia_smi(query: str, kind: str = "gpu") -> list[list[str]]:
    """``nvidia-smi --query-{kind}={query}`` as rows of fields; [] where there is none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-{kind}={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[f.strip() for f in line.split(",")] for line in out.splitlines() if line.strip()]


def gpu_memory_by_pid() -> dict[int, float]:
    """MiB of GPU memory each process holds (nvidia-smi's compute apps)."""
    used: dict[int, float] = {}
    for fields in nvidia_smi("pid,used_memory", "compute-apps"):
        try:
            used[int(fields[0])] = used.get(int(fields[0]), 0.0) + float(fields[1])
        except (ValueError, IndexError):
            continue
    return used


def rss_mib(pid: int) -> float | None:
    try:
        return procfs.rss_mib(pid)
    except ProcessLookupError:
        return None


def placement(
    workers: list[dict[str, Any]], device: str, runtime: str, dry_run: bool
) -> list[dict[str, Any]]:
    """Each worker's device, state, provider and its verdict, GPU MiB (the worker's own
    ``gpu_memory_bytes`` where /readyz has it, else nvidia-smi's; None: neither) and
    resident MiB."""
    by_pid = gpu_memory_by_pid()
    placed = []
    for worker in workers:
        pid = worker.get("pid")
        own = worker.get("gpu_memory_bytes")
        gpu = own / 2**20 if isinstance(own, int) else by_pid.get(pid) if pid else None
        provider = worker.get("provider")
        runs_there, said = provider_verdict(device, runtime, provider, dry_run)
        placed.append(
            {
                "index": worker.get("index"),
                "device": worker.get("device"),
                "state": worker.get("state"),
                "pid": pid,
                "provider": provider,
                "provider_ok": runs_there,
                "provider_said": said,
                "gpu_mib": gpu,
                "gpu_source": "worker" if isinstance(own, int) else "nvidia-smi",
                "rss_mib": rss_mib(pid) if pid is not None else None,
            }
        )
    return placed


def describe(placed: list[dict[str, Any]]) -> str:
    def mib(value: float | None) -> str:
        return "?" if value is None else f"{value:.0f}"

    return ", ".join(
        f"worker {p['index']} {p['device']} {p['state']} on {p.get('provider_said', '?')}:"
        f" GPU {mib(p['gpu_mib'])} MiB, RSS {mib(p['rss_mib'])} MiB"
        for p in placed
    )


class GpuSampler:
    """nvidia-smi's utilization and memory every half second, in a thread, while asked."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for fields in nvidia_smi("utilization.gpu,memory.used")[:1]:
                try:
                    self.samples.append((float(fields[0]), float(fields[1])))
                except (ValueError, IndexError):
                    pass

    def summary(self) -> dict[str, float] | None:
        if not self.samples:
            return None
        utilization = [u for u, _ in self.samples]
        return {
            "util_mean": round(sum(utilization) / len(utilization), 1),
            "util_max": max(utilization),
            "memory_max_mib": max(m for _, m in self.samples),
        }
