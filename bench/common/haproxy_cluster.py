"""Gateway replicas behind a real HAProxy on loopback, configured by ``deploy/haproxy.cfg``:
for ``tests/live/gateway/test_haproxy_live.py`` and ``bench/reliability/haproxy.py``."""

from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT
from bench.common.gateway import UVICORN
from bench.common.net import free_port
from workers.ipc.slab import SLAB_PREFIX

HAPROXY = shutil.which("haproxy")
CONFIG = ROOT / "deploy" / "haproxy.cfg"
NAMES = ("gw1", "gw2", "gw3")  # the config's servers
READY_TIMEOUT_S = 120.0


@dataclass
class Replica:
    """One ``uvicorn gateway.app:app``, restartable on the same ports."""

    name: str
    log: Path
    env: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    agent_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def start(self) -> None:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            # The checksum engine, unless a models file says what to serve.
            **({} if "ASR_MODELS" in self.env else {"ASR_MODEL": "checksum"}),
            "ASR_DEVICES": "cpu",
            "ASR_REPLICA_ID": self.name,
            "ASR_AGENT_PORT": str(self.agent_port),
            "UVICORN_WS_PER_MESSAGE_DEFLATE": "false",
            **self.env,
        }
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, *UVICORN, "--port", str(self.port)],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its workers with it, for the SIGKILL
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _http_ok(f"http://127.0.0.1:{self.port}/readyz"):
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the replica did not become ready"
            time.sleep(0.1)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.process is not None
        if sig is signal.SIGKILL:
            os.killpg(self.process.pid, sig)  # the server and its workers at once
        else:
            self.process.send_signal(sig)
        code = self.process.wait(30)
        if sig is signal.SIGKILL:
            # A killed gateway cannot unlink its workers' slabs: do it for it.
            for segment in Path("/dev/shm").glob(f"{SLAB_PREFIX}{self.process.pid}_*"):
                segment.unlink(missing_ok=True)
        self.process = None
        return code


@dataclass
class Cluster:
    replicas: dict[str, Replica]
    port: int
    socket_path: Path
    process: subprocess.Popen[bytes]
    log: Path  # HAProxy's own log lines (deploy/haproxy.cfg logs to stdout)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def servers(self, backend: str = "gateways") -> dict[str, dict[str, str]]:
        """HAProxy's own view of each server of ``backend`` (``show stat``): status, weight,
        sessions."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.socket_path))
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
        return {row["svname"]: row for row in rows if row["pxname"] == backend}

    def command(self, line: str) -> str:
        """One command of HAProxy's runtime API (``set server gateways/gw2 state maint``)."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(self.socket_path))
            sock.sendall(line.encode() + b"\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        return data.decode()

    def wait_for(
        self, name: str, status: str, timeout: float = 10.0, backend: str = "gateways"
    ) -> float:
        """Seconds until HAProxy says ``status`` (UP, DOWN, DRAIN ...) for ``name``."""
        start = time.monotonic()
        while not self.servers(backend)[name]["status"].startswith(status):
            assert time.monotonic() - start < timeout, self.servers(backend)[name]
            time.sleep(0.02)
        return time.monotonic() - start


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def haproxy_cluster(
    logs: Path,
    replica_env: Mapping[str, str],
    *,
    check_inter_s: float = 0.5,
    http_request_timeout_s: float = 10.0,
    places: int = 64,
    haproxy_env: Mapping[str, str] | None = None,
) -> Iterator[Cluster]:
    """Three replicas (``replica_env`` added to each's) and HAProxy in front, every server
    UP; all stopped on leaving."""
    assert HAPROXY is not None, "haproxy is not installed"
    replicas = {
        name: Replica(name, logs / f"{name}.log", {**replica_env, "ASR_MAX_SESSIONS": str(places)})
        for name in NAMES
    }
    for replica in replicas.values():
        replica.start()
    port, socket_path = free_port(), logs / "haproxy.sock"
    env: dict[str, str] = {
        **os.environ,
        "HAPROXY_BIND": f"127.0.0.1:{port}",
        "HAPROXY_STATS_BIND": f"127.0.0.1:{free_port()}",
        "HAPROXY_STATS_SOCKET": str(socket_path),
        "HAPROXY_MAXCONN": "4000",
        "HAPROXY_HTTP_REQUEST_TIMEOUT": f"{int(http_request_timeout_s * 1000)}ms",
        "HAPROXY_CHECK_INTER": f"{int(check_inter_s * 1000)}ms",
        "ASR_MAX_SESSIONS": str(places),
        **(haproxy_env or {}),
    }
    for index, replica in enumerate(replicas.values(), 1):
        env[f"GW{index}_ADDR"] = f"127.0.0.1:{replica.port}"
        env[f"GW{index}_AGENT_PORT"] = str(replica.agent_port)
    with (logs / "haproxy.log").open("wb") as log:
        process = subprocess.Popen(
            [HAPROXY, "-f", str(CONFIG), "-db"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    cluster = Cluster(replicas, port, socket_path, process, logs / "haproxy.log")
    try:
        deadline = time.monotonic() + 10
        while not socket_path.exists():
            assert process.poll() is None, (logs / "haproxy.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for name in replicas:
            cluster.wait_for(name, "UP")
        yield cluster
    finally:
        process.terminate()
        process.wait(10)
        for replica in replicas.values():
            if replica.process is not None:
                replica.stop()
