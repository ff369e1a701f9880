"""What uvicorn holds for one connection whose session has stopped reading.

A session stops reading its frames while its worker cannot take more audio (the pipeline's
backpressure). Frames the client sends meanwhile wait in uvicorn, each up to its
``--ws-max-size`` (16 MiB): ``ASR_MAX_FRAME_BYTES`` is checked only by the session's
reader, which is blocked. This starts ``uvicorn gateway.app:app`` (checksum engine, one
worker), stops the worker (SIGSTOP), sends 8 valid 1 MiB frames (the reader blocks), then
frames of ``--frame-mib`` as fast as the server takes them for ``--seconds``, and reports
the gateway's RSS before and after::

    python -m bench.ws_queue --frame-mib 15                       # uvicorn's defaults
    python -m bench.ws_queue --frame-mib 15 --uvicorn-args "--ws-max-size 2097152"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import websockets

from bench.common.net import free_port


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise KeyError("VmRSS")


def worker_pid(http: str) -> int:
    with urllib.request.urlopen(f"{http}/readyz", timeout=5) as response:
        pid: int = json.load(response)["workers"][0]["pid"]
    return pid


async def flood(url: str, frame: bytes, seconds: float) -> tuple[int, str]:
    """Valid 1 MiB frames until the session stops reading, then ``frame`` as fast as the
    server takes them."""
    sent = 0
    outcome = "still open"
    # No compression: a deflated frame of zeros would be a thousandth of its size on the wire.
    async with websockets.connect(url, max_size=None, compression=None) as ws:
        await ws.send(json.dumps({"mode": "online", "wav_name": "q", "is_speaking": True}))
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                await asyncio.wait_for(
                    ws.send(frame), timeout=max(0.1, deadline - time.monotonic())
                )
                sent += 1
        except TimeoutError:
            pass  # the server stopped reading: TCP pushes back
        except websockets.ConnectionClosed as closed:
            outcome = f"closed {closed.rcvd.code if closed.rcvd else 'none'}"
        return sent, outcome


def start_gateway(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int, int]:
    """The server, its port and its worker's pid, once it is ready."""
    port = free_port()
    env = {**os.environ, "ASR_MODEL": "checksum", "ASR_DEVICES": "cpu"}
    command = [sys.executable, "-m", "uvicorn", "gateway.app:app", "--port", str(port)]
    command += ["--log-level", "warning", *shlex.split(args.uvicorn_args)]
    server = subprocess.Popen(command, env=env)
    for _ in range(300):
        try:
            return server, port, worker_pid(f"http://127.0.0.1:{port}")
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("the gateway did not start")


async def measure(args: argparse.Namespace, server: subprocess.Popen[bytes], port: int) -> str:
    frame = os.urandom(args.frame_mib << 20)
    before = rss_mib(server.pid)
    sent, outcome = await flood(f"ws://127.0.0.1:{port}/", frame, args.seconds)
    after = rss_mib(server.pid)
    return (
        f"uvicorn {args.uvicorn_args or '(defaults)'}: {sent} frames of {args.frame_mib} MiB"
        f" taken in {args.seconds:g} s ({outcome}); gateway RSS {before:.0f} -> {after:.0f} MiB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frame-mib", type=int, default=1, help="each frame, MiB")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--uvicorn-args", default="", help="extra uvicorn options")
    args = parser.parse_args(argv)
    server, port, worker = start_gateway(args)
    try:
        os.kill(worker, signal.SIGSTOP)  # the session's reader blocks once slots run out
        print(asyncio.run(measure(args, server, port)))
        os.kill(worker, signal.SIGCONT)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
