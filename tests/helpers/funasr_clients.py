"""FunASR's own Python client (``tests/live/clients/vendor/funasr_wss_client.py``, unchanged)
run as a user runs it, and a WebSocket relay between a client and the gateway that records
every frame the gateway sends and the close code of each connection."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as serve_websocket
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from bench.common import ROOT
from bench.common.gateway import Gateway
from tests.helpers.live_gateway import Wav
from tests.helpers.timing import within

CLIENT = ROOT / "tests" / "live" / "clients" / "vendor" / "funasr_wss_client.py"
RUN_TIMEOUT_S = 60.0
# What the client prints when a file's session went wrong (its exit code stays 0).
FAILURES = ("Traceback", "did not acknowledge", "failed to finalize", "Exception")


@dataclass(frozen=True, slots=True)
class ClientRun:
    folder: Path
    stdout: str
    stderr: str

    def events(self, meeting: str) -> list[dict[str, Any]]:
        path = self.folder / "logs" / f"meeting_{meeting}" / "events.jsonl"
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def texts(self, meeting: str) -> list[str]:
        path = self.folder / "out" / f"text.{meeting}"
        return path.read_text(encoding="utf-8").splitlines()


async def run_client(
    port: int, folder: Path, wavs: list[Wav], *options: str, host: str = "127.0.0.1"
) -> ClientRun:
    """``funasr_wss_client.py`` on a ``wav.scp`` of ``wavs``, in ``folder``; exit 0 and
    nothing on stdout or stderr that says a file failed."""
    scp = "".join(f"{wav.name} {wav.path.relative_to(folder)}\n" for wav in wavs)
    (folder / "wav.scp").write_text(scp, encoding="utf-8")
    command = [
        sys.executable,
        str(CLIENT),
        *("--host", host, "--port", str(port), "--ssl", "0"),
        *("--audio_in", "wav.scp", "--output_dir", "out", "--log_dir", "logs"),
        *("--result_timeout", "20"),
        *options,
    ]
    with within(RUN_TIMEOUT_S):
        done = await anyio.run_process(command, cwd=folder, check=False, stdin=subprocess.DEVNULL)
    run = ClientRun(
        folder, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )
    output = f"stdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    assert done.returncode == 0, output
    for failure in FAILURES:
        assert failure not in run.stdout + run.stderr, output
    return run


@dataclass(slots=True)
class Relay:
    """Connections relayed to the gateway: each one's text frames from the gateway, and
    the close code the gateway sent it."""

    port: int = 0
    frames: list[list[dict[str, Any]]] = field(default_factory=list)
    close_codes: list[int | None] = field(default_factory=list)


@asynccontextmanager
async def relay_to(server: Gateway) -> AsyncIterator[Relay]:
    """A WebSocket relay on a free port: frames pass both ways unchanged, and a close on
    either side closes the other with the same code."""
    relay = Relay()

    async def handle(client: ServerConnection) -> None:
        frames: list[dict[str, Any]] = []
        relay.frames.append(frames)
        async with connect(
            server.url, subprotocols=[Subprotocol("binary")], compression=None, proxy=None
        ) as gateway:

            async def upstream() -> None:
                try:
                    async for frame in client:
                        await gateway.send(frame)
                except ConnectionClosed:
                    pass
                await gateway.close(client.close_code or 1000, client.close_reason or "")

            async with anyio.create_task_group() as group:
                group.start_soon(upstream)
                try:
                    async for frame in gateway:
                        assert isinstance(frame, str), "the gateway sends text frames only"
                        frames.append(json.loads(frame))
                        await client.send(frame)
                except ConnectionClosed:
                    pass
                relay.close_codes.append(gateway.close_code)
                await client.close(gateway.close_code or 1000, gateway.close_reason or "")

    async with serve_websocket(
        handle, "127.0.0.1", 0, subprotocols=[Subprotocol("binary")], compression=None
    ) as listening:
        relay.port = next(iter(listening.sockets)).getsockname()[1]
        yield relay
