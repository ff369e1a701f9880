"""Pools whose streams give the results a test hands them (``FakeStream.give``), for the
session's forwarder and writer run in process."""

from __future__ import annotations

from typing import Any

import anyio

from shared.errors import StreamClosedError
from shared.messages import Decoded, StreamOptions, StreamResult
from workers.pool import Urgency


class FakeStream:
    """A pool stream that gives the results it is handed (``give``)."""

    def __init__(
        self, stream_id: int = 0, capacity: int = 16, urgency: Urgency = Urgency.BACKGROUND
    ) -> None:
        self.stream_id = stream_id
        self.urgency = urgency  # the class it was opened with
        self.worker_index = 0
        self._in, self._out = anyio.create_memory_object_stream[StreamResult](capacity)
        self.finished = False
        self.closed = False
        self.audio = bytearray()  # what was sent and finished with
        self._seq = 0

    def give(self, text: str, *, final: bool = False) -> None:
        self._in.send_nowait(StreamResult(self.stream_id, self._seq, Decoded(text), final))
        self._seq += 1

    async def send(self, audio: Any) -> None:
        self.audio += bytes(audio)

    async def finish(self, audio: Any = b"") -> None:
        self.audio += bytes(audio)
        self.finished = True

    async def receive(self) -> StreamResult:
        try:
            return await self._out.receive()
        except anyio.EndOfStream:
            raise StreamClosedError("the stream has ended") from None

    def receive_nowait(self) -> StreamResult:
        return self._out.receive_nowait()

    async def aclose(self) -> None:
        self.closed = True
        self._in.close()
        self._out.close()

    async def __aenter__(self) -> FakeStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> StreamResult:
        try:
            return await self._out.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


class FakePool:
    text_is_delta = False
    regions = False
    session_places = 1

    def __init__(self) -> None:
        self.streams: list[FakeStream] = []

    def open_stream(
        self, options: StreamOptions | None = None, urgency: Urgency = Urgency.BACKGROUND
    ) -> FakeStream:
        self.streams.append(FakeStream(urgency=urgency))
        return self.streams[-1]


def fake_model(name: str = "m") -> Any:
    """A served model on fake pools: a streaming one and an offline companion."""
    from gateway.limits.model_places import ModelPlaces
    from gateway.session.serving import ServedModel
    from shared.engines import Role

    pools: Any = (FakePool(), FakePool())  # duck-typed WorkerPools
    return ServedModel(name, pools[0], {Role.OFFLINE: pools[1]}, ModelPlaces(name, None))
