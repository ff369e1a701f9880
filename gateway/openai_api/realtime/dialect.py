"""``/v1/realtime?intent=transcription``: OpenAI's Realtime API in transcription mode.

The dialect is a translation, at the ASGI level, to and from FunASR's protocol: the session
behind it is the FunASR endpoint's own (``gateway.session.entry.serve_new_session``,
then ``gateway.session.session``), on a Starlette ``WebSocket`` whose ``receive`` and ``send`` are
this module's. So a realtime session has the same admission (places, the audio budget,
the per-client cap, the admission wait), the same limits, metrics, drain and close codes,
and the same pools, as a FunASR session; nothing about serving is written twice.

::

    client events -> parse (realtime_events) -> InputBuffer (realtime_turns) -> FunASR frames
    FunASR frames <- session <- pools
    FunASR results -> Transcripts (realtime_turns) -> server events -> client

What is ours alone: the events a transcription session answers itself (``session.created``
and ``.updated``, the buffer's ``speech_started``, ``speech_stopped``, ``committed``,
``cleared``, and ``error``), and the limits on the events that never reach the session:

- an event over ASR_MAX_TEXT_BYTES that is not an append, or an append of more audio than
  ASR_MAX_FRAME_BYTES of 16 kHz PCM is (in seconds), is refused with 1009, as a frame over
  its limit is (``realtime_events``, which refuses most of them before parsing them);
- an append's audio is decoded and resampled a second at a time, each second when the
  session has taken the frames of the one before: one event costs the event loop a
  second's work at a time, and the gateway one second's audio in each form;
- events count against ASR_MAX_FRAMES_PER_SECOND as frames do: an append by how little
  audio it carries (20 ms or more is free), any other event one frame. (The frames an
  append becomes count again in the session's own bucket; an append too small to make a
  frame would escape it, not this.)
- ``MAX_INVALID_EVENTS`` refused events close the session with 1008: OpenAI keeps a session
  open after an error, but a client that sends nothing else valid only costs us.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import deque
from typing import Literal

import anyio
from starlette.responses import JSONResponse
from starlette.types import Message, Scope
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.audio.resample import resampled_bytes
from gateway.limits.rate import TokenBucket, frame_cost, text_cost
from gateway.metrics import GatewayMetrics
from gateway.openai_api.errors import openai_error_body
from gateway.openai_api.realtime.config import (
    RealtimeEventError,
    RealtimeSettings,
    turn_detection_for,
)
from gateway.openai_api.realtime.events import (
    AudioAppended,
    BufferCleared,
    BufferCommitted,
    EventLimits,
    SessionUpdate,
    parse_client_event,
)
from gateway.openai_api.realtime.server_events import (
    EventIds,
    encode,
    realtime_error_event,
    session_event,
    session_object,
)
from gateway.openai_api.realtime.transcripts import Transcripts
from gateway.openai_api.realtime.turns import Event, InputBuffer, Output, ToClient
from gateway.session.closing import CLOSE_GRACE_S, close_reason
from gateway.session.entry import refused_handshake, serve_new_session
from gateway.session.resume.resumes import owner_of
from gateway.session.serving import ServedModel, Serving
from gateway.session.translated import TranslatedConnection
from shared.engines import Role
from shared.errors import (
    CLOSE_POLICY_VIOLATION,
    GatewayError,
    ProtocolError,
    ShuttingDownError,
)

logger = logging.getLogger(__name__)

MAX_INVALID_EVENTS = 100
APPEND_PIECE_S = 1.0  # an append's audio is decoded and resampled this much at a time
_NO_AUDIO = memoryview(b"")
SUBPROTOCOL = "realtime"  # what OpenAI's browser clients offer
KEY_SUBPROTOCOL = "openai-insecure-api-key."  # and the key after it: no headers in a browser
TRANSCRIPTION_INTENT = "transcription"
# FunASR close codes as OpenAI error codes, for the error event before the close.
ERROR_CODES = {
    1008: ("invalid_request_error", "session_limit"),
    1009: ("invalid_request_error", "event_too_large"),
    1011: ("server_error", "server_error"),
    1012: ("server_error", "server_shutting_down"),
    1013: ("server_error", "server_busy"),
}


async def serve_realtime(
    serving: Serving | None, websocket: WebSocket, metrics: GatewayMetrics
) -> None:
    metrics.realtime_sessions.inc()
    offered = websocket.scope.get("subprotocols") or []
    _browser_key_as_header(websocket.scope, offered)
    if serving is not None:
        refusal = refused_handshake(serving, websocket, metrics)
        if refusal is not None:
            await _deny(websocket, refusal.status, refusal.message)
            return
    # A browser that offers subprotocols fails the connection unless one is chosen.
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    if serving is None:
        await refuse(websocket, ShuttingDownError("the server is not serving"), metrics)
        return
    intent = websocket.query_params.get("intent", TRANSCRIPTION_INTENT)
    if intent != TRANSCRIPTION_INTENT:
        error = ProtocolError(
            f"intent={intent[:40]!r} is not served: this server serves transcription"
            " sessions only (?intent=transcription)"
        )
        await refuse(websocket, error, metrics, code="unsupported_intent")
        return
    owner = owner_of(serving.settings.access, websocket.headers, websocket.scope["query_string"])
    # OpenAI's SDKs put a realtime model in the URL: ours by its name, theirs the default
    # (LiveKit's OpenAI STT names it there for a gateway, and a realtime-only one of
    # OpenAI's starts the session with no server VAD, as OpenAI serves it).
    url_name = websocket.query_params.get("model", "")
    model = serving.models.get(url_name)
    dialect = RealtimeDialect(websocket, serving, metrics, model, url_name)
    await serve_new_session(serving, dialect.funasr_websocket(), metrics, owner, model)


class RealtimeDialect(TranslatedConnection):
    """One connection's translation. ``receive`` and ``send`` are the ASGI callables of the
    FunASR session's WebSocket: it reads FunASR frames made from the client's events and
    writes FunASR frames that become server events (``gateway.session.translated``)."""

    def __init__(
        self,
        websocket: WebSocket,
        serving: Serving,
        metrics: GatewayMetrics,
        url_model: ServedModel | None = None,
        url_name: str = "",
    ) -> None:
        super().__init__(websocket)
        settings = serving.settings
        self._serving = serving
        self._url_model = url_model
        self._model = url_model or serving.default
        self._metrics = metrics
        self._session_id = f"sess_{secrets.token_hex(12)}"
        self._ids = EventIds(self._session_id)
        self._pending: deque[Output] = deque()
        self._started = False
        self._invalid_events = 0
        self._limits = EventLimits(settings.max_text_bytes, settings.max_frame_bytes)
        self._unheard = _NO_AUDIO  # an append's audio not yet decoded: a piece at a time
        rate = settings.max_frames_per_s
        self._events_bucket = TokenBucket(rate, max(1.0, rate), anyio.current_time())
        self._expires_at = int(time.time() + settings.max_session_s)
        pool = self._model.pool
        model = pool.model.description if pool.model is not None else None
        self._buffer = InputBuffer(
            RealtimeSettings(model=model, turn_detection=turn_detection_for(url_name)),
            self._ids,
            mode=_mode_of(self._model),
            endpoint=settings.endpoint,
            max_turn_bytes=settings.max_segment_bytes,
            max_frame_bytes=settings.max_frame_bytes,
        )
        self._buffer.speakers = self._model.companion(Role.SPEAKER) is not None
        # A re-decoding model's frames add text too, or revise (gateway.funasr.running_text).
        self._transcripts = Transcripts(
            self._buffer, text_is_delta=pool.text_is_delta or pool.regions
        )

    # -- the client's events, as FunASR frames ---------------------------------------------

    async def receive(self) -> Message:
        if not self._started:
            self._started = True
            await self._send_event(self._session_event("session.created"))
            self._pending.extend(self._buffer.start())
        while True:
            while self._pending or self._unheard:
                if not self._pending:
                    self._pending.extend(self._buffer.append(self._next_piece()))
                    continue
                output = self._pending.popleft()
                if isinstance(output, ToClient):
                    # Found while taking audio (speech started or stopped, committed): sent
                    # as the session takes the frames before it, so in order with them.
                    await self._send_event(output.event)
                elif output.text is not None:
                    return {"type": "websocket.receive", "text": output.text}
                else:
                    return {"type": "websocket.receive", "bytes": output.data}
            message = await self._websocket.receive()
            if message["type"] == "websocket.disconnect":
                return message
            try:
                self._pending.extend(await self._take(message.get("text")))
            except RealtimeEventError as error:
                await self._send_event(realtime_error_event(self._ids.event(), error))
                self._metrics.realtime_errors.labels(error.code).inc()
                self._invalid_events += 1
                if self._invalid_events >= MAX_INVALID_EVENTS:
                    too_many = ProtocolError(f"{MAX_INVALID_EVENTS} events were refused")
                    return await self._close_for(too_many)
            except GatewayError as error:  # a limit of ours: the session ends
                return await self._close_for(error)

    async def _take(self, text: str | None) -> list[Output]:
        """One client event: what it asks of the session and the client, in order."""
        if text is None:
            raise RealtimeEventError(
                "invalid_event", "binary frames are not Realtime events: send JSON text"
            )
        settings = self._buffer.settings
        event = parse_client_event(text, settings, self._limits)
        if isinstance(event, AudioAppended):  # as the session's frames cost: by their audio
            pcm_bytes = len(event.audio) * (2 if settings.encoding != "pcm16" else 1)
            cost = frame_cost(resampled_bytes(pcm_bytes, settings.rate))
            # and the JSON around it by its length, as text frames are
            base64_chars = 4 * -(-len(event.audio) // 3)
            cost += text_cost(len(text) - base64_chars) - 1.0
        else:
            cost = text_cost(len(text))
        if not self._events_bucket.take(cost, anyio.current_time()):
            raise ProtocolError(
                "more events a second than ASR_MAX_FRAMES_PER_SECOND; send audio in"
                " appends of 20 ms or more"
            )
        match event:
            case AudioAppended(audio=audio):
                self._unheard = memoryview(audio)
                return []
            case BufferCommitted(event_id=event_id):
                return self._buffer.commit(event_id)
            case BufferCleared():
                return self._buffer.clear()
            case SessionUpdate(settings=settings, dialect=dialect):
                outputs = [
                    *self._choose_model(settings.model),
                    *self._buffer.update(settings, dialect),
                ]
                name = "session.updated" if dialect == "ga" else "transcription_session.updated"
                return [*outputs, ToClient(self._session_event(name))]

    def _choose_model(self, name: str | None) -> list[Output]:
        """A session update's transcription model: one of ours by its name (OpenAI's names
        keep the model the session has), before the session's first audio."""
        chosen = self._serving.models.get(name or "")
        if chosen is None or chosen is self._model:
            return []
        if self._url_model is not None or not self._buffer.heard_nothing:
            why = "the URL's ?model=" if self._url_model is not None else "its first audio"
            raise RealtimeEventError(
                "invalid_value",
                f"the session is on model {self._model.name!r} since {why}; open another"
                f" session for {chosen.name!r}",
                param="session.audio.input.transcription.model",
            )
        self._model = chosen
        self._transcripts.text_is_delta = chosen.pool.text_is_delta or chosen.pool.regions
        self._buffer.speakers = chosen.companion(Role.SPEAKER) is not None
        return self._buffer.choose_model(chosen.name, _mode_of(chosen))

    def _next_piece(self) -> bytes:
        settings = self._buffer.settings
        size = int(APPEND_PIECE_S * settings.bytes_per_second) // 2 * 2
        piece, rest = self._unheard[:size], self._unheard[size:]
        self._unheard = rest if rest else _NO_AUDIO  # the append's bytes go with its last piece
        return bytes(piece)

    async def _close_for(self, error: GatewayError) -> Message:
        """End the connection ourselves; the session behind sees the client gone."""
        await refuse(self._websocket, error, self._metrics, lock=self._send_lock)
        return {"type": "websocket.disconnect", "code": error.close_code}

    # -- FunASR frames, as server events (sent by TranslatedConnection.send) --------------------
    # A frame sent again at the close sends what of its events had not gone out, though
    # Transcripts has moved on (a completed item is forgotten).

    def _translate(self, frame: dict[str, object]) -> list[Event]:
        if frame.get("type") == "error":
            code = frame.get("code")
            kind, name = ERROR_CODES.get(code if isinstance(code, int) else 1011, ERROR_CODES[1011])
            self._metrics.realtime_errors.labels(name).inc()
            message = frame.get("message")
            error = RealtimeEventError(name, str(message), type_=kind)
            return [realtime_error_event(self._ids.event(), error)]
        events = self._transcripts.result(frame)
        return [{"event_id": self._ids.event(), **event} for event in events]

    async def _send_event(self, event: Event) -> None:
        if "event_id" not in event:
            event = {"event_id": self._ids.event(), **event}
        async with self._send_lock:
            await self._websocket.send({"type": "websocket.send", "text": encode(event)})

    # -- helpers -------------------------------------------------------------------------

    def _session_event(self, name: str) -> Event:
        session = session_object(
            self._session_id, self._buffer.settings, self._buffer.dialect, self._expires_at
        )
        return {"event_id": self._ids.event(), **session_event(name, session)}


async def refuse(
    websocket: WebSocket,
    error: GatewayError,
    metrics: GatewayMetrics,
    *,
    code: str | None = None,
    lock: anyio.Lock | None = None,
) -> None:
    """An error event, then the close with the error's code; a gone client is fine."""
    kind, name = ERROR_CODES.get(error.close_code, ERROR_CODES[1011])
    name = code or name
    metrics.realtime_errors.labels(name).inc()
    event = realtime_error_event(
        f"event_{secrets.token_hex(6)}", RealtimeEventError(name, error.message, type_=kind)
    )
    with anyio.move_on_after(CLOSE_GRACE_S, shield=True):
        async with lock or anyio.Lock():
            try:
                await websocket.send_text(encode(event))
                await websocket.close(error.close_code, close_reason(error.message))
                # Read past what the client sent meanwhile: uvicorn queues a few frames
                # and then stops reading, so a flooding client's close reply would wait
                # behind them for uvicorn's close timeout (10 s), and so would it.
                while (await websocket.receive())["type"] != "websocket.disconnect":
                    pass
            except (RuntimeError, OSError, WebSocketDisconnect):
                pass


def _browser_key_as_header(scope: Scope, offered: list[str]) -> None:
    """OpenAI's browser clients cannot set headers on a WebSocket handshake: they send the
    key as the subprotocol ``openai-insecure-api-key.KEY``. It is read as the key of
    ``Authorization: Bearer KEY`` (before anything reads the headers), unless the request
    has that header."""
    key = next((p[len(KEY_SUBPROTOCOL) :] for p in offered if p.startswith(KEY_SUBPROTOCOL)), "")
    headers = scope["headers"]
    if key and not any(name == b"authorization" for name, _ in headers):
        scope["headers"] = [*headers, (b"authorization", f"Bearer {key}".encode("latin-1"))]


async def _deny(websocket: WebSocket, status: int, message: str) -> None:
    """The handshake answered with OpenAI's error JSON (uvicorn can), else refused bare."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        kind = "invalid_request_error"
        code = "invalid_api_key" if status == 401 else "forbidden_origin"
        body = {"error": openai_error_body(message, kind, None, code)}
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        await websocket.send_denial_response(JSONResponse(body, status, headers))
    else:
        await websocket.close(CLOSE_POLICY_VIOLATION, close_reason(message))


def _mode_of(model: ServedModel) -> Literal["online", "2pass"]:
    """Each turn's FunASR mode: 2pass where the model has an offline decoder for the
    completed transcript."""
    return "online" if model.companion(Role.OFFLINE) is None else "2pass"
