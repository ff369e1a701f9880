"""A side task's fault is its own: ``keep_running`` starts it again, a drain that fails
still ends in the server's shutdown, and a server whose app lost serving exits."""

from __future__ import annotations

import itertools
import logging
import signal
from collections.abc import Iterator
from types import FrameType

import anyio
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from gateway.ops.server import DrainingServer
from gateway.ops.side_tasks import keep_running
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio


async def test_a_task_that_fails_is_started_again_after_a_growing_pause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: list[float] = []

    async def flaky() -> None:
        runs.append(anyio.current_time())
        if len(runs) < 4:
            raise RuntimeError(f"failure {len(runs)}")

    with within(5):
        await keep_running("the flaky task", flaky, first_pause_s=0.05, most_pause_s=0.1)
    assert len(runs) == 4
    pauses = [later - earlier for earlier, later in itertools.pairwise(runs)]
    assert pauses[0] >= 0.05
    assert pauses[1] >= 0.1  # doubled
    failures = [r for r in caplog.records if r.name == "gateway.ops.side_tasks"]
    assert [r.exc_info[1].args for r in failures if r.exc_info and r.exc_info[1]] == [
        ("failure 1",),
        ("failure 2",),
        ("failure 3",),
    ]
    assert "the flaky task failed; starting it again in 0.05 s" in failures[0].getMessage()


async def test_cancelling_a_kept_task_ends_it() -> None:
    started = anyio.Event()
    runs = 0

    async def forever() -> None:
        nonlocal runs
        runs += 1
        started.set()
        await anyio.sleep_forever()

    with within(5):
        async with anyio.create_task_group() as group:
            group.start_soon(keep_running, "forever", forever)
            await started.wait()
            group.cancel_scope.cancel()
    assert runs == 1


class App:
    """An ASGI app with a lifespan; its drain fails, and ``lost`` is what it answers to
    ``serving_lost``."""

    def __init__(self) -> None:
        self.drains = 0
        self.lost: str | None = None

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
        raise RuntimeError("the drain broke")

    def serving_lost(self) -> str | None:
        return self.lost


class Server(DrainingServer):
    def __init__(self, app: App) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on", log_config=None)
        super().__init__(config, app)
        self.serving = anyio.Event()

    async def main_loop(self) -> None:
        self.serving.set()
        await super().main_loop()


@pytest.fixture
def raised() -> Iterator[list[int]]:
    """SIGTERM recorded instead of fatal while the server is not handling it."""
    signals: list[int] = []

    def record(sig: int, frame: FrameType | None) -> None:
        signals.append(sig)

    previous = signal.signal(signal.SIGTERM, record)
    try:
        yield signals
    finally:
        signal.signal(signal.SIGTERM, previous)


async def test_a_drain_that_fails_still_shuts_the_server_down(
    raised: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    app = App()
    server = Server(app)
    with within(10):
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve)
            await server.serving.wait()
            signal.raise_signal(signal.SIGTERM)
    assert app.drains == 1
    assert server.should_exit
    assert server.lost is None
    assert raised == []  # a shutdown of its own, not the signal's default
    assert any("the drain failed" in r.getMessage() for r in caplog.records)


async def test_a_server_whose_app_lost_serving_shuts_down_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App()
    server = Server(app)
    caplog.set_level(logging.ERROR, "gateway.ops.server")
    with within(10):
        async with anyio.create_task_group() as group:
            group.start_soon(server.serve)
            await server.serving.wait()
            app.lost = "serving ended: RuntimeError: a pool broke"
    assert server.lost == "serving ended: RuntimeError: a pool broke"
    assert app.drains == 0
    assert any("a pool broke; exiting" in r.getMessage() for r in caplog.records)
