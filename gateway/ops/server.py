"""uvicorn's ``Server``, draining the gateway's sessions before its own shutdown.

On SIGTERM or SIGINT uvicorn's ``Server.handle_exit`` sets ``should_exit``, and its shutdown
then closes every WebSocket with 1012 at once. :class:`DrainingServer` overrides
``handle_exit``, the server's handler of those signals: the first one starts the app's
drain beside uvicorn's main loop, and once the drain is over the server shuts down as
usual and the process exits 0. A second signal is uvicorn's own: it stops waiting (a
second Ctrl-C forces the exit), and uvicorn re-raises the signal once it has shut down.
A drain that fails still ends in that shutdown. ``python -m gateway`` serves with it
(``gateway.__main__``).

uvicorn goes on answering HTTP when its app's lifespan ends by a fault: nothing is served
any more, but the process lives, and a process manager that only watches the process
(systemd's ``Restart=on-failure``, Docker's ``restart:``) never restarts it. An app that
says so (``LosesServing``: the gateway's ``serving_lost``) is asked at each tick of the
main loop, and on a reason the server shuts down with ``lost`` set; ``gateway.__main__``
then exits 1.
"""

from __future__ import annotations

import asyncio
import logging
from types import FrameType
from typing import Protocol, runtime_checkable

import anyio
import uvicorn

logger = logging.getLogger(__name__)


class Drains(Protocol):
    async def drain(self) -> None: ...


@runtime_checkable
class LosesServing(Protocol):
    def serving_lost(self) -> str | None: ...


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: Drains) -> None:
        super().__init__(config)
        self._app = app
        self._serving_lost = app.serving_lost if isinstance(app, LosesServing) else None
        self.lost: str | None = None  # why serving ended while the server still ran
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_asked: anyio.Event | None = None  # set by the first signal, while serving
        self._signalled = False

    async def main_loop(self) -> None:
        """uvicorn's main loop, and beside it the drain, once a signal asks for it."""
        self._loop = asyncio.get_running_loop()
        self._drain_asked = anyio.Event()
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._drain_when_asked)
                await super().main_loop()
                group.cancel_scope.cancel()  # a second signal does not wait for the drain
        finally:
            self._drain_asked = None

    async def on_tick(self, counter: int) -> bool:
        if self.lost is None and self._serving_lost is not None:
            self.lost = self._serving_lost()
            if self.lost is not None:
                logger.error("%s; exiting, for the process manager to start us again", self.lost)
                self.should_exit = True
        return await super().on_tick(counter)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._signalled or self._drain_asked is None or self._loop is None:
            # A second signal, or one while starting or shutting down: uvicorn's own.
            super().handle_exit(sig, frame)
            return
        self._signalled = True
        # A signal handler runs between two bytecodes of whatever the main thread was
        # doing, possibly inside the event loop itself: only schedule, never act here.
        self._loop.call_soon_threadsafe(self._drain_asked.set)

    async def _drain_when_asked(self) -> None:
        assert self._drain_asked is not None
        await self._drain_asked.wait()
        try:
            await self._app.drain()
        except Exception:
            logger.exception("the drain failed; shutting down now")
        self.should_exit = True  # uvicorn's main loop ends at its next tick
