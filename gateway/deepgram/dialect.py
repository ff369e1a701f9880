"""``/v1/listen``: Deepgram's live API, as a translation at the ASGI level to and from FunASR's
protocol (as ``gateway.openai_api.realtime.dialect`` is OpenAI's): the session behind is the
FunASR endpoint's own, so a Deepgram session has the same admission, places, audio budget,
limits, metrics, drain, models and pools as the other two dialects.

::

    client messages -> ListenStream (stream) -> FunASR frames -> session -> pools
    FunASR results  -> ListenResults (results) -> Deepgram messages -> client

What is this dialect's own: the handshake (Deepgram's keys ``Token KEY``, its query, its
error shape), the control messages (``KeepAlive``, ``Finalize``, ``CloseStream``,
``Configure``), Deepgram's 10 s without audio or a message (``NET-0001``), and the limits on
what never reaches the session: every client message counts against
ASR_MAX_FRAMES_PER_SECOND as a frame does (audio by how little of it there is, 20 ms or more
free; a control message by its length), a binary message of more audio than
ASR_MAX_FRAME_BYTES of 16 kHz PCM closes with 1009, and its audio is decoded and resampled
a second at a time, as the session takes the frames before.
"""

from __future__ import annotations

import datetime
import json
import logging
import uuid
from collections import deque
from urllib.parse import parse_qs

import anyio
from starlette.responses import JSONResponse
from starlette.types import Message, Scope
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.deepgram.control import (
    CloseStream,
    Configure,
    ControlError,
    Finalize,
    KeepAlive,
    parse_control,
)
from gateway.deepgram.params import ListenParams, ListenRequestError, parse_params
from gateway.deepgram.results import ListenResults, ModelInfo
from gateway.deepgram.stream import ListenAudioError, ListenStream, ToSession
from gateway.limits.rate import TokenBucket, frame_cost, text_cost
from gateway.metrics import GatewayMetrics
from gateway.session.closing import CLOSE_GRACE_S, close_reason
from gateway.session.entry import refused_handshake, serve_new_session
from gateway.session.resume.resumes import owner_of
from gateway.session.serving import ServedModel, Serving
from gateway.session.translated import TranslatedConnection
from shared.engines import Role
from shared.errors import (
    CLOSE_POLICY_VIOLATION,
    FrameTooLargeError,
    GatewayError,
    ProtocolError,
)

logger = logging.getLogger(__name__)

IDLE_S = 10.0  # Deepgram's: no audio and no message for this long closes (NET-0001)
MAX_INVALID_MESSAGES = 100
PIECE_S = 1.0  # a message's audio is decoded and resampled this much at a time
CLOSE_NORMAL = 1000
CLOSE_IDLE = 1011  # Deepgram's close for NET-0001
TOKEN_SUBPROTOCOL = "token"  # browsers: Sec-WebSocket-Protocol: token, KEY
_NO_AUDIO = memoryview(b"")


async def serve_listen(
    serving: Serving | None, websocket: WebSocket, metrics: GatewayMetrics
) -> None:
    metrics.listen_sessions.inc()
    offered = websocket.scope.get("subprotocols") or []
    _browser_key_as_header(websocket.scope, offered)
    request_id = str(uuid.uuid4())
    if serving is None:
        await _deny(websocket, 503, "Service Unavailable", "the server is not serving", request_id)
        return
    refusal = refused_handshake(serving, websocket, metrics)
    if refusal is not None:
        await _deny(websocket, refusal.status, "INVALID_AUTH", refusal.message, request_id)
        return
    try:
        params = parse_params(_query(websocket.scope), list(serving.models))
    except ListenRequestError as error:
        metrics.listen_errors.labels("bad_request").inc()
        await _deny(websocket, 400, "Bad Request", error.message, request_id)
        return
    await websocket.accept(subprotocol=TOKEN_SUBPROTOCOL if TOKEN_SUBPROTOCOL in offered else None)
    owner = owner_of(serving.settings.access, websocket.headers, websocket.scope["query_string"])
    model = serving.models.get(params.model or "") or serving.default
    dialect = ListenDialect(websocket, serving, metrics, model, params, request_id)
    await serve_new_session(serving, dialect.funasr_websocket(), metrics, owner, model)
    await dialect.closed()


class ListenDialect(TranslatedConnection):
    """One connection's translation: ``receive`` and ``send`` are the ASGI callables of the
    FunASR session's WebSocket (``gateway.session.translated``)."""

    def __init__(
        self,
        websocket: WebSocket,
        serving: Serving,
        metrics: GatewayMetrics,
        model: ServedModel,
        params: ListenParams,
        request_id: str,
    ) -> None:
        super().__init__(websocket)
        settings = serving.settings
        self._metrics = metrics
        self._created = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        self._max_frame_bytes = settings.max_frame_bytes
        self.stream = ListenStream(
            params,
            mode="online" if model.companion(Role.OFFLINE) is None else "2pass",
            model=model.name,
            endpoint=settings.endpoint,
            max_utterance_bytes=settings.max_segment_bytes,
            max_frame_bytes=settings.max_frame_bytes,
            speakers=model.companion(Role.SPEAKER) is not None,
        )
        pool = model.pool
        info = ModelInfo(
            request_id,
            str(uuid.uuid5(uuid.NAMESPACE_URL, f"asr-gateway:{model.name}")),
            model.name,
            pool.engine or "unknown",
        )
        # A re-decoding model's frames add text too, or revise (gateway.funasr.running_text).
        adds = pool.text_is_delta or pool.regions
        self.results = ListenResults(self.stream, params, info, text_is_delta=adds)
        self._pending: deque[ToSession] = deque(self.stream.start())
        self._unheard = _NO_AUDIO  # a message's audio not yet decoded: a piece at a time
        rate = settings.max_frames_per_s
        self._bucket = TokenBucket(rate, max(1.0, rate), anyio.current_time())
        self._invalid = 0
        self._closing = False  # CloseStream: Metadata and the close once all is answered
        self._answered = anyio.Event()
        self._closed = False

    # -- the client's messages, as FunASR frames ------------------------------------------

    async def receive(self) -> Message:
        while True:
            while self._pending or self._unheard:
                if not self._pending:
                    try:
                        self._pending.extend(self.stream.take_audio(self._next_piece()))
                    except ListenAudioError as error:
                        return await self._close_for(ProtocolError(f"DATA-0000: {error}"))
                    await self._send_found()
                    continue
                output = self._pending.popleft()
                if output.text is not None:
                    return {"type": "websocket.receive", "text": output.text}
                return {"type": "websocket.receive", "bytes": output.data}
            if self._closing:
                gone = await self._answers_or_departure()
                if gone is not None:
                    return gone  # the session stops its work for a client that left
                await self._send_metadata()
                await self._close(CLOSE_NORMAL, "")
                return {"type": "websocket.disconnect", "code": CLOSE_NORMAL}
            message = None
            with anyio.move_on_after(IDLE_S):
                message = await self._websocket.receive()
            if message is None:
                return await self._close_idle()
            if message["type"] == "websocket.disconnect":
                return message
            try:
                self._pending.extend(await self._take(message))
            except ControlError as error:
                await self._refuse_message(error)
                if self._invalid >= MAX_INVALID_MESSAGES:
                    too_many = ProtocolError(f"{MAX_INVALID_MESSAGES} messages were refused")
                    return await self._close_for(too_many)
            except GatewayError as error:  # a limit of ours: the session ends
                return await self._close_for(error)

    async def _answers_or_departure(self) -> Message | None:
        """After ``CloseStream``: wait for every final result, reading (and ignoring) what
        the client still sends meanwhile; its disconnect, if it leaves first."""
        gone: Message | None = None

        async def watch(scope: anyio.CancelScope) -> None:
            nonlocal gone
            while (message := await self._websocket.receive())["type"] != "websocket.disconnect":
                pass
            gone = message
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(watch, group.cancel_scope)
            await self._answered.wait()
            group.cancel_scope.cancel()
        return gone

    async def _take(self, message: Message) -> list[ToSession]:
        """One client message: what it asks of the session, in order."""
        data, text = message.get("bytes"), message.get("text")
        now = anyio.current_time()
        if data is not None:
            sixteen_k = self.stream.sixteen_k_bytes(len(data))
            if sixteen_k > self._max_frame_bytes:
                raise FrameTooLargeError(
                    f"a message of {len(data)} bytes is more audio than ASR_MAX_FRAME_BYTES"
                    f" ({self._max_frame_bytes} bytes of 16 kHz PCM)"
                )
            self._charge(frame_cost(sixteen_k), now)
            self._unheard = memoryview(data)
            return []
        self._charge(text_cost(len(text or "")), now)
        match parse_control(text or ""):
            case KeepAlive():
                return []
            case Finalize():
                outputs = self.stream.finalize()
                if not outputs:  # nothing open to end: the answer is ours, in its turn
                    for answer in self.results.finalize_unopened():
                        await self._send_event(answer)
                return outputs
            case CloseStream():
                self._closing = True
                outputs = self.stream.finalize("close")
                self._check_answered()
                return outputs
            case Configure(keyterms=keyterms):
                outputs = self.stream.configure(keyterms)
                await self._send_event(
                    {
                        "type": "ConfigureSuccess",
                        "request_id": self.results.model.request_id,
                        "keyterms": list(self.stream.params.hotwords),
                    }
                )
                return outputs

    def _charge(self, cost: float, now: float) -> None:
        if not self._bucket.take(cost, now):
            raise ProtocolError(
                "more messages a second than ASR_MAX_FRAMES_PER_SECOND; send audio in"
                " messages of 20 ms or more"
            )

    def _next_piece(self) -> bytes:
        size = self.stream.sent_bytes(PIECE_S)
        piece, rest = self._unheard[:size], self._unheard[size:]
        self._unheard = rest if rest else _NO_AUDIO
        return bytes(piece)

    async def _send_found(self) -> None:
        """What taking audio found: speech starts (``vad_events``), and ``UtteranceEnd``."""
        starts, self.stream.speech_started[:] = list(self.stream.speech_started), []
        if self.stream.params.vad_events:
            for seconds in starts:
                event = {"type": "SpeechStarted", "channel": [0], "timestamp": round(seconds, 3)}
                await self._send_event(event)
        for message in self.results.tick():
            await self._send_event(message)

    # -- FunASR frames, as Deepgram's messages ----------------------------------------------

    async def _pass_close(self, message: Message) -> None:
        async with self._send_lock:  # the session's close, unless ours came first
            if not self._closed:
                self._closed = True
                await self._websocket.send(message)

    def _translate(self, frame: dict[str, object]) -> list[dict[str, object]]:
        if frame.get("type") == "error":
            self._metrics.listen_errors.labels(str(frame.get("code"))).inc()
            return [_error("SessionError", str(frame.get("message")))]
        return self.results.result(frame)

    def _frame_sent(self) -> None:
        self._check_answered()

    def _check_answered(self) -> None:
        if self._closing and self.results.answered:
            self._answered.set()

    # -- helpers --------------------------------------------------------------------------

    async def _send_event(self, event: dict[str, object]) -> None:
        async with self._send_lock:
            if not self._closed:
                await self._websocket.send_text(json.dumps(event, ensure_ascii=False))

    async def _send_metadata(self) -> None:
        """The closing ``Metadata``; a client gone by then is no error of ours."""
        try:
            await self._send_event(self._metadata())
        except (RuntimeError, OSError, WebSocketDisconnect):
            pass

    def _metadata(self) -> dict[str, object]:
        info = self.results.model
        return {
            "type": "Metadata",
            "transaction_key": "deprecated",
            "request_id": info.request_id,
            "sha256": self.stream.audio.digest.hexdigest(),
            "created": self._created,
            "duration": round(self.stream.position_s, 3),
            "channels": 1,
            "models": [info.uuid],
            "model_info": {
                info.uuid: {"name": info.name, "version": "asr-gateway", "arch": info.arch}
            },
        }

    async def _refuse_message(self, error: ControlError) -> None:
        self._invalid += 1
        self._metrics.listen_errors.labels("schema").inc()
        await self._send_event(_error("SchemaError", error.message, error.original))

    async def _close_idle(self) -> Message:
        """Deepgram's timeout: no audio and no message for ``IDLE_S``."""
        self._metrics.listen_errors.labels("NET-0001").inc()
        reason = "NET-0001: no audio or message within 10 s"
        await self._send_event(_error("NetworkError", reason))
        await self._close(CLOSE_IDLE, reason)
        return {"type": "websocket.disconnect", "code": CLOSE_IDLE}

    async def _close_for(self, error: GatewayError) -> Message:
        """End the connection ourselves; the session behind sees the client gone."""
        self._metrics.listen_errors.labels(str(error.close_code)).inc()
        await self._send_event(_error(type(error).__name__, error.message))
        await self._close(error.close_code, error.message)
        return {"type": "websocket.disconnect", "code": error.close_code}

    async def _close(self, code: int, reason: str) -> None:
        with anyio.move_on_after(CLOSE_GRACE_S, shield=True):
            async with self._send_lock:
                if self._closed:
                    return
                self._closed = True
                try:
                    await self._websocket.close(code, close_reason(reason))
                except (RuntimeError, OSError, WebSocketDisconnect):
                    pass

    async def closed(self) -> None:
        """After the session: a connection it left open is closed (normally)."""
        await self._close(CLOSE_NORMAL, "")


def _error(variant: str, description: str, original: str | None = None) -> dict[str, object]:
    """Deepgram's ``Error`` message."""
    error: dict[str, object] = {"type": "Error", "variant": variant, "description": description}
    if original is not None:
        error["message"] = original
    return error


def _query(scope: Scope) -> dict[str, list[str]]:
    return parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True)


def _browser_key_as_header(scope: Scope, offered: list[str]) -> None:
    """Deepgram's browser clients cannot set headers on a WebSocket handshake: they offer
    the subprotocols ``token`` and the key. It is read as ``Authorization: Token KEY``
    (before anything reads the headers), unless the request has that header."""
    if TOKEN_SUBPROTOCOL not in offered or len(offered) < 2:
        return
    key = next((p for p in offered if p != TOKEN_SUBPROTOCOL), "")
    headers = scope["headers"]
    if key and not any(name == b"authorization" for name, _ in headers):
        scope["headers"] = [*headers, (b"authorization", f"Token {key}".encode("latin-1"))]


async def _deny(
    websocket: WebSocket, status: int, code: str, message: str, request_id: str
) -> None:
    """The handshake answered with Deepgram's error JSON (uvicorn can), else refused bare."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        body = {"err_code": code, "err_msg": message, "request_id": request_id}
        headers = {"WWW-Authenticate": "Token"} if status == 401 else None
        await websocket.send_denial_response(JSONResponse(body, status, headers))
    else:
        await websocket.close(CLOSE_POLICY_VIOLATION, close_reason(message))
