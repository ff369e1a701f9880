"""What a dialect translated at the ASGI level shares (OpenAI's realtime, Deepgram's live):
the FunASR session's WebSocket, whose ``receive`` and ``send`` are the dialect's, and the
way the session's result frames go out as the dialect's messages.

The dialect reads the client's messages and returns FunASR frames from ``receive``; the
session's frames come to ``send``, each translated once (``_translate``) into messages
sent one by one. A frame whose send was cancelled is sent again at the close (the
session's pending frames): what of its messages had not gone out goes then, and nothing
twice. The session's close goes through to the client after its last frame.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import deque

import anyio
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketState

from gateway.session.transport import Transport, transport_of

Event = dict[str, object]


class TranslatedConnection(ABC):
    """One client connection in another protocol, over a FunASR session."""

    def __init__(self, websocket: WebSocket) -> None:
        self._websocket = websocket
        # gateway.session.transport finds uvicorn's transport through ``receive.__self__``.
        self.transport: Transport | None = transport_of(websocket)
        self._send_lock = anyio.Lock()
        self._last_frame: str | None = None
        self._unsent: deque[Event] = deque()

    def funasr_websocket(self) -> WebSocket:
        """The session's side: a WebSocket already accepted, as the real one is."""
        inner = WebSocket(self._websocket.scope, self.receive, self.send)
        inner.client_state = WebSocketState.CONNECTED
        inner.application_state = WebSocketState.CONNECTED
        return inner

    @abstractmethod
    async def receive(self) -> Message:
        """The session's next frame: the client's messages, translated."""

    async def send(self, message: Message) -> None:
        if message["type"] != "websocket.send":
            await self._pass_close(message)
            return
        text = message.get("text")
        if text is None:
            return  # the session sends no binary frames
        if self._last_frame != text:
            self._last_frame = text
            self._unsent = deque(self._translate(json.loads(text)))
        while self._unsent:
            await self._send_event(self._unsent[0])
            self._unsent.popleft()
        self._frame_sent()

    async def _pass_close(self, message: Message) -> None:
        """The session's close, after its last frame."""
        async with self._send_lock:
            await self._websocket.send(message)

    @abstractmethod
    def _translate(self, frame: dict[str, object]) -> list[Event]:
        """A FunASR result frame as the client's messages."""

    @abstractmethod
    async def _send_event(self, event: Event) -> None:
        """One message to the client, under the send lock."""

    def _frame_sent(self) -> None:  # noqa: B027 - a hook, optional by design
        """Called once every message of a frame has gone out (nothing by default)."""
