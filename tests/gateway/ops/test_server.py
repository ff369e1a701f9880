"""``DrainingServer``: uvicorn's Server, on a free port in this process, with a fake app."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from types import FrameType

import anyio
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from gateway.ops.server import DrainingServer
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio


class DrainingApp:
    """An ASGI app with a lifespan, whose drain lasts until ``release`` is set."""

    def __init__(self) -> None:
        self.drains = 0
        self.draining = anyio.Event()
        self.drained = False
        self.release = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "lifespan"
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def drain(self) -> None:
        self.drains += 1
        self.draining.set()
        await self.release.wait()
        self.drained = True


@pytest.fixture
def raised() -> Iterator[list[int]]:
    """SIGTERM as it is before the server installs its handler: recorded, not fatal (the
    server puts it back, and re-raises a signal it was stopped by)."""
    signals: list[int] = []

    def record(sig: int, frame: FrameType | None) -> None:
        signals.append(sig)

    previous = signal.signal(signal.SIGTERM, record)
    try:
        yield signals
    finally:
        signal.signal(signal.SIGTERM, previous)


class Server(DrainingServer):
    """Says when it is serving: in its main loop, where a signal drains."""

    def __init__(self, app: DrainingApp) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_config=None)
        super().__init__(config, app)
        self.serving = anyio.Event()

    async def main_loop(self) -> None:
        self.serving.set()  # seen once the loop waits for its first tick
        await super().main_loop()


async def test_the_first_signal_drains_then_the_server_exits_cleanly(raised: list[int]) -> None:
    app = DrainingApp()
    server = Server(app)
    with within(10):
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve)
            await server.serving.wait()
            signal.raise_signal(signal.SIGTERM)
            await app.draining.wait()
            assert not server.should_exit  # uvicorn would be closing every WebSocket now
            app.release.set()
    assert app.drains == 1
    assert app.drained
    assert raised == []  # a clean exit: no signal re-raised


async def test_a_second_signal_is_uvicorns_own(raised: list[int]) -> None:
    app = DrainingApp()
    server = Server(app)
    with within(10):
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve)
            await server.serving.wait()
            signal.raise_signal(signal.SIGTERM)
            await app.draining.wait()
            signal.raise_signal(signal.SIGTERM)
            assert server.should_exit  # no more waiting for the drain
    assert app.drains == 1
    assert not app.drained
    assert raised == [signal.SIGTERM]  # re-raised once shut down, as uvicorn does
