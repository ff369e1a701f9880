"""A file transcription's work stops when its client leaves.

Once a request's body has been read, nothing else reads the ASGI ``receive`` until the
answer is sent; the server's next message there is ``http.disconnect``, sent the moment
the connection closes. ``while_connected`` runs the request's work (a URL fetch, the VAD,
the decodes) beside a task that waits for it and cancels the work: the pool streams close
and the request's place is given back at once, rather than after decoding for nobody.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.requests import Request
from starlette.types import Message, Receive

from gateway.files.request import TranscribeError

T = TypeVar("T")
logger = logging.getLogger(__name__)

# nginx's "client closed request": the answer nobody reads, as counted and logged.
CLIENT_GONE = 499


class _BodyWatch:
    """``receive`` as the request reads it, noting when its body has all arrived."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self.body_read = anyio.Event()
        self.gone = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.gone = True
            self.body_read.set()
        elif not message.get("more_body", False):
            self.body_read.set()
        return message

    async def until_disconnect(self) -> None:
        """Return once the client has gone after sending its whole body. Reads ``receive``
        only then, so never a message the request's own reading should have had. A client
        gone while sending never returns: the reading fails on its own (400
        ``disconnected``)."""
        await self.body_read.wait()
        if self.gone:
            await anyio.sleep_forever()
        while not self.gone:
            message = await self._receive()
            self.gone = message["type"] == "http.disconnect"


async def while_connected(request: Request, work: Callable[[Request], Awaitable[T]]) -> T:
    """``work(request)``'s answer; cancelled as soon as the client disconnects, which is
    then a :class:`TranscribeError` 499 ``client_gone``. ``work`` is given the request
    to read its body from."""
    watch = _BodyWatch(request.receive)
    watched = Request(request.scope, watch.receive)
    done: list[T] = []
    failed: list[Exception] = []
    async with anyio.create_task_group() as group:

        async def cancel_when_gone() -> None:
            try:
                await watch.until_disconnect()
            except Exception:
                # The watch alone failed (a server's receive that raised): the work goes
                # on and answers; only a seen disconnect stops it.
                logger.exception("watching for the client's disconnect failed")
                return
            group.cancel_scope.cancel()

        group.start_soon(cancel_when_gone)
        try:
            done.append(await work(watched))
        except Exception as exc:  # raised as it is below: a task group would wrap it
            failed.append(exc)
        group.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if not done:
        raise TranscribeError(
            CLIENT_GONE, "client_gone", "the client closed the connection before the answer"
        )
    return done[0]
