"""A session's reading side: each client frame received within the limits' deadline,
parsed against the frame cap and rate, its events counted, gathered and queued for the
forwarder without waiting.

It outlives each connection of a resumable session: the parser, the limits and the count of
utterances are the session's, so a resume reads on where the dropped connection stopped.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from starlette.types import Message
from starlette.websockets import WebSocket

from gateway.funasr.parser import (
    ConfigReceived,
    Event,
    ParserState,
    ProtocolParser,
)
from gateway.limits.session_limits import SessionLimits
from gateway.metrics import GatewayMetrics
from gateway.session.gather import FrameGatherer
from gateway.settings import GatewaySettings
from shared.errors import ProtocolError

EVENT_BUFFER = 5  # parsed events (up to ASR_MAX_FRAME_BYTES each) read ahead
MAX_EVENTS_PER_FRAME = 3  # an update and an end, after audio held back (session.gather)
CLEAN_CLOSE_CODES = (1000, 1001)


class ClientGone(Exception):
    """The client closed the connection or dropped it: nobody to tell anything.
    ``left``: with a close frame (1000, or 1001 from a page going away), which ends a
    resumable session too; without one (1006), a resumable session parks."""

    def __init__(self, left: bool = False) -> None:
        super().__init__()
        self.left = left


class SessionReader:
    """Frames in, events out to ``events_in``; ``open_utterances`` counts the configs whose
    final result the session still owes, ``utterances`` every config received."""

    def __init__(
        self,
        settings: GatewaySettings,
        metrics: GatewayMetrics,
        events_in: MemoryObjectSendStream[Event],
        event_taken: Callable[[], anyio.Event],
        on_resumable: Callable[[], None],
    ) -> None:
        self.parser = ProtocolParser(settings.max_frame_bytes, settings.max_text_bytes)
        self.limits = SessionLimits(settings, anyio.current_time())
        self.open_utterances = 0
        self.utterances = 0
        self._metrics = metrics
        self._events_in = events_in
        self._event_taken = event_taken  # set each time the forwarder takes an event
        self._on_resumable = on_resumable
        self._gatherer = FrameGatherer(settings.max_frame_bytes)
        self._idle_scope: anyio.CancelScope | None = None

    async def room_for_a_frame(self) -> None:
        """Wait until a frame's events fit: a frame taken is queued at once, so a lost
        connection loses nothing, and nothing waits on the forwarder after."""
        room = EVENT_BUFFER - MAX_EVENTS_PER_FRAME
        while self._events_in.statistics().current_buffer_used > room:
            await self._event_taken().wait()

    async def receive(self, websocket: WebSocket, heard: Callable[[], None]) -> list[Event]:
        """The client's next frame, within the limits' deadline, parsed against the frame
        cap and rate; ``heard`` is told of a frame before it is parsed. Raises
        ``ProtocolError`` past the deadline, ``ClientGone``."""
        owed = self.parser.state is ParserState.ENDED and self.open_utterances > 0
        deadline = self.limits.next_frame(self.parser.state, owed)
        message: Message | None = None
        with anyio.CancelScope(deadline=deadline.at) as scope:
            self._idle_scope = scope
            message = await websocket.receive()
        self._idle_scope = None
        if message is None:
            raise ProtocolError(deadline.why)
        if message["type"] == "websocket.disconnect":
            raise ClientGone(left=message.get("code") in CLEAN_CLOSE_CODES)
        heard()
        parser, now = self.parser, anyio.current_time()
        text, data = message.get("text"), message.get("bytes")
        if text is not None:
            self.limits.frame(None, parser.session_config.audio_fs, now, len(text))
            return parser.receive_text(text)
        if data is not None:
            self.limits.frame(len(data), parser.session_config.audio_fs, now)
            return parser.receive_bytes(data)
        return []

    def take(self, events: list[Event]) -> None:
        """Count what the events start and spend, then queue them, gathered."""
        audio_fs = self.parser.session_config.audio_fs
        for event in events:
            if isinstance(event, ConfigReceived):
                self.open_utterances += 1
                self.utterances += 1
                self._metrics.utterances.labels(event.config.mode).inc()
            self.limits.event(event, audio_fs, anyio.current_time())
        self._queue(self._gatherer.gather(events))

    def flush(self) -> None:
        """Queue the audio held back: it is the session's, not the connection's."""
        self._queue(self._gatherer.flush())

    def _queue(self, events: list[Event]) -> None:
        """What the parser took, the session has: the forwarder takes events whatever
        happens to the connection."""
        for event in events:
            if isinstance(event, ConfigReceived) and event.config.resumable:
                self._on_resumable()
            self._events_in.send_nowait(event)

    def results_sent(self) -> None:
        """Every result owed is sent: the idle deadline runs again, also for a read already
        waiting untimed, as it did while the session owed the client a result."""
        self.limits.results_sent(anyio.current_time())
        if self._idle_scope is not None:
            self._idle_scope.deadline = self.limits.next_frame(self.parser.state, False).at
