"""The gateway under probe: ``uvicorn gateway.app:app`` in a subprocess (checksum engine, two
CPU workers), its log in a file, and what it holds read from /proc (Linux).

``PROFILE`` is the settings every probe runs under unless it says otherwise: the README's
defaults, with the deadlines shortened so that a probe sees each one within seconds
(the bound is the same code at any value; a probe's figures scale with it)."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.common import procfs
from bench.common.gateway import NO_DEFLATE, QUIET, NotReady, start
from bench.common.net import free_port

READY_TIMEOUT_S = 120.0
PROFILE: Mapping[str, str] = {
    "ASR_MODEL": "checksum",
    "ASR_DEVICES": "cpu,cpu",
    "ASR_MAX_SESSIONS": "80",  # 64 parked sessions, the victims and a few more
    "ASR_MAX_SESSIONS_PER_CLIENT": "8",  # the default is 0: no cap at all
    "ASR_CONFIG_TIMEOUT": "2",
    "ASR_FIRST_AUDIO_TIMEOUT": "3",
    "ASR_IDLE_TIMEOUT": "3",
    "ASR_MAX_SESSION_SECONDS": "20",
    "ASR_SEND_TIMEOUT": "3",
    "ASR_RESUME_WINDOW": "4",
    "ASR_MAX_BUFFERED_SECONDS": "600",
    "ASR_UPLOAD_TIMEOUT": "8",
}


def rss_mib(pid: int) -> float:
    try:
        return procfs.rss_mib(pid)
    except ProcessLookupError:
        return 0.0


def cpu_s(pid: int) -> float:
    try:
        return procfs.cpu_seconds(pid)
    except ProcessLookupError:
        return 0.0


class ProbedGateway:
    """The gateway with ``env`` over ``PROFILE``; ``stop`` ends it (SIGTERM: its drain)."""

    def __init__(self, env: Mapping[str, str], log: Path) -> None:
        self.agent_port = free_port()
        self.env = {**PROFILE, "ASR_AGENT_PORT": str(self.agent_port), **env}
        self.log = log
        try:
            self.server = start(
                {**NO_DEFLATE, **self.env}, log=log, options=QUIET, ready_timeout=READY_TIMEOUT_S
            )
        except NotReady:
            raise SystemExit(f"the gateway did not become ready; its log: {log}") from None
        self.port = self.server.port
        self.process = self.server.process
        self.worker_pids = self.server.worker_pids()

    @property
    def http(self) -> str:
        return self.server.http

    def readyz(self) -> dict[str, Any]:
        return self.server.readyz()

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {series: value}, a series named as Prometheus prints it."""
        with urllib.request.urlopen(f"{self.http}/metrics", timeout=5) as response:
            text = response.read().decode()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def rss_mib(self) -> float:
        return rss_mib(self.process.pid)

    def workers_rss_mib(self) -> float:
        return sum(rss_mib(pid) for pid in self.worker_pids)

    def cpu_s(self) -> float:
        return cpu_s(self.process.pid)

    def workers_cpu_s(self) -> float:
        return sum(cpu_s(pid) for pid in self.worker_pids)

    def log_text(self) -> str:
        return self.server.output()

    def wait_released(self, timeout_s: float = 60.0, others: int = 0) -> bool:
        """Until no session is live or parked but ``others`` (a probe's leftovers must not
        meet the next)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            values = self.metrics()
            live = values.get("asr_sessions_active", 0.0)
            if live <= others and not values.get("asr_sessions_parked"):
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        self.server.stop()


class PeakSampler:
    """Samples the RSS of the gateway and the sum of its workers' every ``interval_s`` in
    a thread, for the peaks between ``__enter__`` and ``__exit__``."""

    def __init__(self, gateway: int, workers: Sequence[int], interval_s: float = 0.05) -> None:
        self._gateway = gateway
        self._workers = tuple(workers)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.gateway_peak_mib = 0.0
        self.workers_peak_mib = 0.0

    def _sample(self) -> None:
        while True:
            self.gateway_peak_mib = max(self.gateway_peak_mib, rss_mib(self._gateway))
            workers = sum(rss_mib(pid) for pid in self._workers)
            self.workers_peak_mib = max(self.workers_peak_mib, workers)
            if self._stop.wait(self._interval_s):
                return

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
