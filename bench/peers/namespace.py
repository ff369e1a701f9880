"""A network namespace that holds a loopback interface alone, for a server that listens on
every address and has no flag to choose one (sherpa-onnx's WebSocket server).

``isolate`` runs the calling command in such a namespace: where this process sees any
interface but ``lo``, it execs itself again under ``unshare --map-root-user --net`` (a user
namespace too, so that no root is needed where the kernel lets users create them); inside,
it brings ``lo`` up and returns. Whatever the command then starts listens there alone:
nothing outside the namespace can reach it, the host's loopback included, and nothing
inside can reach out. A firewall rule would need root and touch the host's rules; a proxy
in front of the server would add a hop to every frame measured.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

MARKER = "ASR_BENCH_LOOPBACK_NAMESPACE"  # set in the re-executed command: no second try
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = struct.Struct("16sH22x")  # struct ifreq: the name, then ifr_flags, 40 bytes


def interfaces(pid: int | str = "self") -> list[str]:
    """The interfaces of the process's network namespace: ``/proc/PID/net/dev``'s (not
    ``/sys/class/net``, which shows the namespace that mounted ``/sys``)."""
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return [line.split(":", 1)[0].strip() for line in lines]


def bring_up_loopback() -> None:
    """``ip link set lo up``, without iproute2: a new namespace's ``lo`` starts down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        answer = fcntl.ioctl(sock, _SIOCGIFFLAGS, _IFREQ.pack(b"lo", 0))
        flags = _IFREQ.unpack(answer)[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))


def isolate(module: str, argv: Sequence[str]) -> None:
    """Return in a namespace of ``lo`` alone, brought up; else exec ``python -m MODULE
    ARGV`` in a new one (no return). ``SystemExit`` where no namespace can be had."""
    if interfaces() == ["lo"]:
        bring_up_loopback()
        return
    if os.environ.get(MARKER):
        raise SystemExit(f"still in a network namespace with {interfaces()} after unshare")
    unshare = shutil.which("unshare")
    if unshare is None:
        raise SystemExit("util-linux's unshare is needed: the server must not listen outside")
    sys.stdout.flush()
    sys.stderr.flush()
    command = [unshare, "--map-root-user", "--net", "--", sys.executable, "-m", module, *argv]
    os.execve(unshare, command, {**os.environ, MARKER: "1"})
