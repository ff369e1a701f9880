"""Each worker's GPU memory, as the NVIDIA driver counts it (``nvidia-smi``'s compute apps:
what the process holds on the device, the CUDA context and torch's cache included).

Asked at most once every ``REFRESH_S`` whatever the scrape rate, in a thread, with a
timeout: a scrape can never make the gateway start more than one ``nvidia-smi`` in that
time, nor wait on a hung driver. Without ``nvidia-smi`` (no NVIDIA driver) nothing is asked.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping

import anyio

REFRESH_S = 5.0
TIMEOUT_S = 2.0
QUERY = ("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
MIB = 1 << 20

Run = Callable[[list[str]], str]


def parse_compute_apps(output: str) -> dict[int, int]:
    """``nvidia-smi``'s ``pid, used_memory`` lines (MiB) as bytes by pid; a process on two
    devices counts both."""
    used: dict[int, int] = {}
    for line in output.splitlines():
        pid, _, memory = line.partition(",")
        if pid.strip().isdigit() and memory.strip().isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(memory) * MIB
    return used


def _nvidia_smi(command: list[str]) -> str:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=TIMEOUT_S, check=True
    ).stdout


class GpuMemory:
    """The last answer, refreshed when older than ``REFRESH_S``."""

    def __init__(self, run: Run = _nvidia_smi, executable: str | None = None) -> None:
        self._run = run
        self._executable = executable or shutil.which("nvidia-smi")
        self._asked_at = -REFRESH_S
        self.by_pid: Mapping[int, int] = {}

    async def refresh(self) -> Mapping[int, int]:
        now = anyio.current_time()
        if self._executable is None or now - self._asked_at < REFRESH_S:
            return self.by_pid
        self._asked_at = now
        try:
            output = await anyio.to_thread.run_sync(self._run, [self._executable, *QUERY])
        except (OSError, subprocess.SubprocessError):
            self.by_pid = {}  # the driver did not answer: no figure rather than an old one
        else:
            self.by_pid = parse_compute_apps(output)
        return self.by_pid
