"""``bench.peers.sherpa_onnx`` on the tiny model: its export as sherpa-onnx reads it, the
real server started on it in a network namespace of loopback alone, one stream through the
probe. Skipped where ``sherpa-onnx-bin`` is not installed."""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import socket
import struct
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from bench.common import ROOT
from bench.peers.namespace import interfaces
from bench.peers.sherpa_onnx import server_binary
from tests.helpers.timing import within
from workers.models.export.sherpa import SherpaFiles, export, metadata, read_metadata

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        server_binary() is None,
        reason="sherpa-onnx-bin is not installed: pip install sherpa-onnx-bin==2.0.1",
    ),
]

READY = re.compile(rb"sherpa-onnx server ready: pid (\d+) on ws://127\.0\.0\.1:(\d+)/")
_SIOCGIFADDR = 0x8915


def _namespaces_allowed() -> bool:
    """Whether this host lets the command make its network namespace (a container may not)."""
    probe = ["unshare", "--map-root-user", "--net", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0
    except FileNotFoundError:  # no util-linux
        return False


def _addresses() -> list[str]:
    """The IPv4 addresses of this test's network namespace, loopback's among them."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name in interfaces():
            try:
                answer = fcntl.ioctl(sock, _SIOCGIFADDR, struct.pack("256s", name.encode()))
            except OSError:  # no IPv4 address
                continue
            found.append(socket.inet_ntoa(answer[20:24]))
    return found


def _refused(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


async def _ready_line(process: Process, stderr: BufferedByteReceiveStream) -> re.Match[bytes]:
    seen = b""
    while True:
        try:
            line = await stderr.receive_until(b"\n", 1 << 20)
        except anyio.EndOfStream:
            pytest.fail(f"exited {await process.wait()} before its server was ready:\n{seen!r}")
        seen += line + b"\n"
        if (match := READY.search(line)) is not None:
            return match


async def test_one_stream_through_sherpas_server_on_loopback_alone(
    tmp_path: Path, model_cache: Path, tiny_streaming_model: Path
) -> None:
    if not _namespaces_allowed():
        pytest.skip("no network namespace can be made here: unshare --map-root-user --net")
    # Here, where torch is in already: the command finds it, and starts in seconds.
    export(tiny_streaming_model, "int8")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bench.peers.sherpa_onnx", "--model", "synthetic:tiny"]
    command += ["--precision", "int8", "--servers", "sherpa", "--streams", "1"]
    command += ["--arrivals", "uniform", "--seconds", "3", "--out", str(out)]
    env = {**os.environ, "ASR_MODEL_CACHE": str(model_cache)}
    async with await anyio.open_process(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as process:
        assert process.stderr is not None
        assert process.stdout is not None
        stderr = BufferedByteReceiveStream(process.stderr)
        with within(240):
            ready = await _ready_line(process, stderr)
        # While its probe streams (3 s): the server's namespace holds lo alone, and none of
        # this namespace's addresses, loopback's included, reaches its port.
        pid, port = int(ready[1]), int(ready[2])
        assert interfaces(pid) == ["lo"]
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        addresses = _addresses()
        assert "127.0.0.1" in addresses
        assert [a for a in addresses if not _refused(a, port)] == []
        with within(60):
            rest = b"".join([chunk async for chunk in stderr])
            table = b"".join([chunk async for chunk in process.stdout]).decode()
            code = await process.wait()
    assert code == 0, table + rest.decode(errors="replace")

    report = json.loads((out / "sherpa-onnx-int8.json").read_text())
    (side,) = report["sides"]
    (point,) = side["report"]["points"]
    assert (point["streams"], point["errors"]) == (1, 0)
    assert math.isfinite(point["chunk_p95_ms"])
    assert math.isfinite(point["final_p95_ms"])
    assert side["report"]["capacity"] == {"uniform": 1}
    assert side["memory"]["processes"] == 1
    assert side["memory"]["pss_mib"] > 0
    assert "| sherpa-onnx | uniform | 1 | 0 |" in table

    expected = metadata(tiny_streaming_model)
    for precision in ("fp32", "int8"):
        encoder = SherpaFiles.of(tiny_streaming_model, precision).encoder
        assert read_metadata(encoder).items() >= expected.items()
