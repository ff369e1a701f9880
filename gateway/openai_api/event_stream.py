"""``stream=true``'s answer: server-sent events produced while the response runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from starlette.types import Receive, Scope, Send

from gateway.files.endpoint import HeldResponse

STREAM_BUFFER = 4  # events between the decodes and the socket: the socket sets the pace


Produce = Callable[[MemoryObjectSendStream[bytes]], Awaitable[None]]


class EventStream(HeldResponse):
    """``text/event-stream`` whose events ``produce`` sends while the response runs, in a
    task of the response's own (not an async generator: the decodes' task group must not
    be suspended across a ``yield``); a client gone cancels it."""

    def __init__(self, produce: Produce) -> None:
        self._send, receive = anyio.create_memory_object_stream[bytes](STREAM_BUFFER)
        self._produce = produce
        super().__init__(
            receive,
            media_type="text/event-stream",
            # No proxy may hold the events back (nginx buffers unless told not to).
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(self._run)
            try:
                await super().__call__(scope, receive, send)
            finally:
                group.cancel_scope.cancel()

    async def _run(self) -> None:
        async with self._send:
            await self._produce(self._send)
