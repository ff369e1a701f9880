"""What uvicorn holds for one connection whose session has stopped reading.

A session stops reading its frames while its worker cannot take more audio (the pipeline's
backpressure). Frames the client sends meanwhile wait in uvicorn, each up to its
``--ws-max-size`` (16 MiB): ``ASR_MAX_FRAME_BYTES`` is checked only by the session's
reader, which is blocked. This starts ``uvicorn gateway.app:app`` (checksum engine, one
worker), stops the worker (SIGSTOP), sends 8 valid 1 MiB frames (the reader blocks), then
frames of ``--frame-mib`` as fast as the server takes them for ``--seconds``, and reports
the gateway's RSS before and after::

    python -m bench.abuse.ws_queue --frame-mib 15                       # uvicorn's defaults
    python -m bench.abuse.ws_queue --frame-mib 15 --uvicorn-args "--ws-max-size 2097152"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import sys
import time

import websockets

from bench.common.gateway import QUIET, Gateway, start
from bench.common.procfs import rss_mib


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


def start_gateway(args: argparse.Namespace) -> Gateway:
    """The server (uvicorn's defaults but ``--uvicorn-args``), once it is ready."""
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu"}
    return start(env, options=[*QUIET, *shlex.split(args.uvicorn_args)])


async def measure(args: argparse.Namespace, server: Gateway) -> str:
    frame = os.urandom(args.frame_mib << 20)
    before = rss_mib(server.pid)
    sent, outcome = await flood(server.url, frame, args.seconds)
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
    with start_gateway(args) as server:
        (worker,) = server.worker_pids()
        os.kill(worker, signal.SIGSTOP)  # the session's reader blocks once slots run out
        print(asyncio.run(measure(args, server)))
        os.kill(worker, signal.SIGCONT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
