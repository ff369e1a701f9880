"""The session core in process, without a socket or a worker: a real ``Serving`` (places,
budget, resumes, settings) whose models' pools answer in the test's own event loop, and
WebSocket connections that are ASGI message streams the test writes and reads.

``EchoPool`` answers as the checksum engine does (``<samples>:<crc32>`` of everything the
stream has had, on every piece), so results say exactly what audio reached the pool; it
never leaves the process, so a test of the session, its entry or the realtime dialect runs
in milliseconds. The endpoints are the app's own (``serve_websocket``, ``serve_realtime``):
only the pools and the socket are stand-ins.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, cast

import anyio
import numpy as np
from anyio.abc import TaskGroup
from starlette.types import Message, Scope
from starlette.websockets import WebSocket

from gateway.limits.access import ClientSessions
from gateway.limits.admission import Admission
from gateway.limits.budget import AudioBudget
from gateway.limits.model_places import ModelPlaces
from gateway.limits.transcriptions import TranscriptionLimiter
from gateway.metrics import GatewayMetrics
from gateway.models.table import single_model
from gateway.session.resume.resumes import ResumableSessions
from gateway.session.serving import ServedModel, Serving
from gateway.settings import GatewaySettings
from shared.messages import StreamOptions
from shared.settings import PoolSettings
from tests.helpers.fake_pool import FakeStream
from tests.helpers.timing import within
from workers.pool import Urgency, WorkerPool

Endpoint = Callable[[Serving | None, WebSocket, GatewayMetrics], Awaitable[None]]


def checksum_text(audio: bytes) -> str:
    """What the checksum engine (and ``EchoStream``) says of ``audio``."""
    return f"{len(audio) // 2}:{zlib.crc32(audio):08x}"


class EchoStream(FakeStream):
    """A pool stream answered in process: one result per piece sent, the final at
    ``finish``; ``aclose`` abandons it."""

    def __init__(self, stream_id: int, options: StreamOptions) -> None:
        super().__init__(stream_id, capacity=1024)
        self.options = options

    async def send(self, audio: Any) -> None:
        self.audio += _bytes(audio)
        self.give(checksum_text(bytes(self.audio)))

    async def finish(self, audio: Any = b"") -> None:
        self.audio += _bytes(audio)
        self.finished = True
        self.give(checksum_text(bytes(self.audio)), final=True)
        self._in.close()


def _bytes(audio: Any) -> bytes:
    if isinstance(audio, np.ndarray):
        return audio.astype("<i2").tobytes()
    return bytes(audio)


@dataclass
class EchoPool:
    """What a session uses of a ``WorkerPool``, answered in process."""

    settings: PoolSettings = field(default_factory=lambda: PoolSettings(model="checksum"))
    text_is_delta: bool = False
    regions: bool = False
    session_places: int = 1
    ready: bool = True
    health: str | None = None
    model: None = None
    engine: str = "echo"
    streams: list[EchoStream] = field(default_factory=list)

    def open_stream(
        self, options: StreamOptions | None = None, urgency: Urgency = Urgency.BACKGROUND
    ) -> EchoStream:
        stream = EchoStream(len(self.streams), options or StreamOptions())
        self.streams.append(stream)
        return stream

    def status(self) -> list[Any]:
        return []


def echo_model(name: str = "echo", max_sessions: int | None = None) -> ServedModel:
    pool = cast(WorkerPool, EchoPool())
    return ServedModel(name, pool, {}, ModelPlaces(name, max_sessions))


def harness_serving(
    settings: GatewaySettings | None = None, models: Mapping[str, ServedModel] | None = None
) -> Serving:
    """A real ``Serving`` on echo pools: ``models`` (default: one, ``echo``)."""
    settings = settings or GatewaySettings(idle_timeout_s=10.0)
    models = dict(models or {"echo": echo_model()})
    default = next(iter(models))
    table = single_model(replace(settings.pool, model=default))
    return Serving(
        replace(settings, models=table),
        models,
        Admission(settings.max_sessions),
        ClientSessions(settings.access.max_sessions_per_client),
        TranscriptionLimiter(settings.transcribe.concurrency),
        AudioBudget(settings.max_buffered_bytes),
        ResumableSessions(
            settings.replica_id,
            settings.resume_window_s,
            settings.max_parked_sessions,
            settings.max_parked_per_client,
        ),
    )


class Connection:
    """A client's WebSocket connection to an endpoint in process: its frames in, the
    server's messages out, ASGI as uvicorn would speak it."""

    def __init__(self, path: str, query: str, headers: Mapping[str, str]) -> None:
        self.scope: Scope = {
            "type": "websocket",
            "path": path,
            "query_string": query.encode("latin-1"),
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.9", 50000),
            "subprotocols": ["binary"],
        }
        self._to_app, self._app_in = anyio.create_memory_object_stream[Message](64)
        self._app_out, self._from_app = anyio.create_memory_object_stream[Message](1024)
        self._to_app.send_nowait({"type": "websocket.connect"})
        self.closed_with: int | None = None

    async def receive(self) -> Message:  # the app's ASGI receive
        return await self._app_in.receive()

    async def send(self, message: Message) -> None:  # the app's ASGI send
        await self._app_out.send(message)

    def websocket(self) -> WebSocket:
        return WebSocket(self.scope, self.receive, self.send)

    async def send_text(self, text: str) -> None:
        await self._to_app.send({"type": "websocket.receive", "text": text})

    async def send_json(self, message: Mapping[str, Any]) -> None:
        await self.send_text(json.dumps(message))

    async def send_bytes(self, data: bytes) -> None:
        await self._to_app.send({"type": "websocket.receive", "bytes": data})

    async def disconnect(self, code: int = 1006) -> None:
        """The client gone: with a close frame (1000), or without one (1006)."""
        await self._to_app.send({"type": "websocket.disconnect", "code": code})

    async def next_message(self) -> Message:
        """The app's next ASGI message (its accept, a frame, its close)."""
        return await self._from_app.receive()

    async def receive_json(self) -> dict[str, Any]:
        """The server's next frame, as JSON; ``Closed`` with its code once it closed."""
        while True:
            message = await self.next_message()
            match message["type"]:
                case "websocket.send":
                    frame: dict[str, Any] = json.loads(message["text"])
                    return frame
                case "websocket.close":
                    self.closed_with = int(message.get("code", 1000))
                    raise Closed(self.closed_with)
                case _:
                    continue  # the accept

    async def until_closed(self) -> list[dict[str, Any]]:
        """Every frame up to the server's close (``closed_with`` says its code)."""
        frames = []
        try:
            while True:
                frames.append(await self.receive_json())
        except Closed:
            return frames


class Closed(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@asynccontextmanager
async def connected(
    endpoint: Endpoint,
    serving: Serving,
    metrics: GatewayMetrics,
    group: TaskGroup,
    path: str = "/",
    query: str = "",
    headers: Mapping[str, str] | None = None,
) -> AsyncIterator[Connection]:
    """A connection served by ``endpoint`` in ``group``; disconnected on leaving if the
    server has not closed it."""
    connection = Connection(path, query, headers or {})
    done = anyio.Event()

    async def serve() -> None:
        try:
            await endpoint(serving, connection.websocket(), metrics)
        finally:
            done.set()

    group.start_soon(serve)
    try:
        yield connection
    finally:
        if not done.is_set():
            await connection.disconnect(1000)
        with anyio.fail_after(10):
            await done.wait()


@asynccontextmanager
async def served(
    endpoint: Endpoint,
    serving: Serving,
    metrics: GatewayMetrics | None = None,
    *,
    query: str = "",
    headers: Mapping[str, str] | None = None,
    path: str = "/",
    deadline_s: float = 5.0,
) -> AsyncIterator[Connection]:
    """One connection served in a task group of its own, within ``deadline_s``."""
    with within(deadline_s):
        async with anyio.create_task_group() as group:
            metrics = metrics or GatewayMetrics()
            async with connected(endpoint, serving, metrics, group, path, query, headers) as c:
                yield c
