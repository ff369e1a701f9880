"""One WebSocket connection: one task group of a reader, a forwarder and a writer.

::

    reader:    ws frames -> ProtocolParser -> [events, bounded]
    forwarder: [events] -> the utterance's logic (gateway.utterance) -> its actions:
               pool streams opened, fed and finished; passes handed on -> [passes, bounded]
    writer:    [passes] -> each pass's stream results, in order -> ResultFrames -> ws frames

Each mode's logic is sans I/O (``gateway.utterance``): it turns the parser's events into
actions, and the forwarder only carries them out, answering its questions (the VAD's
answer to a piece, where to cut long audio) before it reads the next event.

Every hand-off is bounded: a slow worker makes ``AudioStream.send`` wait, which fills the
events stream, which stops the reader, which leaves frames unread in uvicorn, which stops
reading the socket, and TCP pushes back on the client. A slow client makes the writer wait,
which leaves results unread, which makes ``send`` wait the same way.

The first task to fail decides how the session ends: an error frame and its close code
(``GatewayError``), or nothing at all when the client has gone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway import transport
from gateway.closing import CLOSE_GRACE_S, close_with_error
from gateway.limits import SessionLimits
from gateway.metrics import GatewayMetrics
from gateway.protocol import (
    AudioReceived,
    ConfigReceived,
    ConfigUpdated,
    EndOfUtterance,
    EndWithoutUtterance,
    Event,
    ParserState,
    ProtocolParser,
)
from gateway.results import Label, end_acknowledgement
from gateway.serving import Serving
from gateway.streams import Acknowledge, Pass, SessionStreams
from gateway.utterance import Utterance, utterance_for
from shared.errors import GatewayError, ProtocolError, ShuttingDownError, WorkerError

logger = logging.getLogger(__name__)

EVENT_BUFFER = 4  # parsed frames (up to ASR_MAX_FRAME_BYTES each) read ahead
PASS_BUFFER = 1  # passes handed to the writer ahead of the one it is relaying


class _ClientGone(Exception):
    """The client closed the connection or dropped it: nobody to tell anything."""


class Session:
    """Serves one accepted WebSocket until the client leaves or an error closes it."""

    def __init__(self, websocket: WebSocket, serving: Serving, metrics: GatewayMetrics) -> None:
        settings = serving.settings
        self._websocket = websocket
        self._settings = settings
        self._admission = serving.admission
        self._metrics = metrics
        self._parser = ProtocolParser(settings.max_frame_bytes, settings.max_text_bytes)
        self._events_in, self._events = anyio.create_memory_object_stream[Event](EVENT_BUFFER)
        self._passes_in, self._passes = anyio.create_memory_object_stream[Pass | Acknowledge](
            PASS_BUFFER
        )
        self._streams = SessionStreams(serving, self._passes_in)
        self._open_utterances = 0  # configs received whose final result is not sent yet
        # Ends that asked for the acknowledgement and have not had it, oldest first.
        self._owed_acknowledgements: list[Label] = []
        self._idle_scope: anyio.CancelScope | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._ended = False
        self._error: GatewayError | None = None
        self._limits = SessionLimits(settings, anyio.current_time())
        self._closed_under = False  # the server's WebSocket layer closed the connection

    async def run(self) -> None:
        limit = self._settings.max_session_s
        try:
            async with self._streams:
                with anyio.move_on_after(limit) as session_scope:
                    async with anyio.create_task_group() as group:
                        self._group = group
                        for task in (self._read, self._forward, self._write, self._watch_drain):
                            group.start_soon(self._guard, task)
                if session_scope.cancelled_caught and not self._ended:
                    self._error = ProtocolError(
                        f"the session reached its maximum length of {limit:g} s"
                        " (ASR_MAX_SESSION_SECONDS)"
                    )
        finally:
            for end in (self._events_in, self._events, self._passes_in, self._passes):
                end.close()
        if self._error is not None:
            code = self._error.close_code
            self._metrics.session_errors.labels(str(code)).inc()
            logger.info("closing a session with %d: %s", code, self._error.message)
            config = self._parser.session_config
            await close_with_error(
                self._websocket,
                self._error,
                mode=config.mode,
                wav_name=config.wav_name,
                owed_acknowledgements=self._owed_acknowledgements,
            )
        elif self._closed_under:
            logger.info(
                "a session's connection was closed by uvicorn: a protocol error of the"
                " client's, or no pong within --ws-ping-timeout"
            )
            await transport.let_go(self._websocket, CLOSE_GRACE_S)

    async def _guard(self, task: Callable[[], Awaitable[None]]) -> None:
        """Run one of the session's tasks; the first to fail ends the whole session."""
        try:
            await task()
        except GatewayError as exc:
            self._end(exc)
        except (_ClientGone, WebSocketDisconnect):
            self._end(None)
        except Exception as exc:
            logger.exception("session task %s failed", getattr(task, "__name__", task))
            self._end(GatewayError(f"internal error: {type(exc).__name__}"))

    def _end(self, error: GatewayError | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        assert self._group is not None
        self._group.cancel_scope.cancel()

    # -- reader -----------------------------------------------------------------------

    async def _read(self) -> None:
        parser, now = self._parser, anyio.current_time
        async with self._events_in:
            while True:
                message = await self._receive()
                text, data = message.get("text"), message.get("bytes")
                if text is not None:
                    self._limits.frame(None, parser.session_config.audio_fs, now())
                    events = parser.receive_text(text)
                elif data is not None:
                    self._limits.frame(len(data), parser.session_config.audio_fs, now())
                    events = parser.receive_bytes(data)
                else:
                    continue
                for event in events:
                    if isinstance(event, ConfigReceived):
                        if self._admission.draining.is_set():
                            await self._refuse_utterance()
                        self._open_utterances += 1
                        self._metrics.utterances.labels(event.config.mode).inc()
                    self._limits.event(event, parser.session_config.audio_fs, now())
                    await self._events_in.send(event)

    async def _receive(self) -> Message:
        """The client's next frame, within the limits' deadline."""
        owed = self._parser.state is ParserState.ENDED and self._open_utterances > 0
        deadline = self._limits.next_frame(self._parser.state, owed, anyio.current_time())
        message: Message | None = None
        with anyio.CancelScope(deadline=deadline.at) as scope:
            self._idle_scope = scope
            message = await self._websocket.receive()
        self._idle_scope = None
        if message is None:
            raise ProtocolError(deadline.why)
        if message["type"] == "websocket.disconnect":
            raise _ClientGone
        return message

    async def _refuse_utterance(self) -> None:
        """No new utterance while draining; the ones still owed their results get them
        first (the writer closes the session after the last), within the drain timeout."""
        if not self._open_utterances:
            raise ShuttingDownError("the server is shutting down; reconnect later")
        await anyio.sleep_forever()

    # -- forwarder --------------------------------------------------------------------

    async def _forward(self) -> None:
        utterance: Utterance | None = None
        async with self._passes_in:
            async for event in self._events:
                match event:
                    case ConfigReceived(config=config):
                        streams = self._streams
                        settings = streams.utterance_settings()
                        utterance = utterance_for(config, settings, vad=streams.vad)
                        await self._streams.carry_out(utterance, utterance.start())
                    case AudioReceived(pcm=pcm):
                        assert utterance is not None, "the parser lets no audio before a config"
                        await self._streams.carry_out(utterance, utterance.audio(pcm))
                    case ConfigUpdated(config=config):
                        assert utterance is not None, "the parser updates only an utterance"
                        utterance.update(config)
                    case EndOfUtterance(acknowledge=acknowledge):
                        assert utterance is not None, "the parser lets no end before a config"
                        if acknowledge:
                            # Set before the last pass can finish: the writer reads it then.
                            self._owe_acknowledgement(utterance.label)
                        await self._streams.carry_out(utterance, utterance.end())
                        utterance = None
                    case EndWithoutUtterance(acknowledge=True, config=config):
                        label = Label(config.mode, config.wav_name)
                        self._owe_acknowledgement(label)
                        await self._passes_in.send(Acknowledge(label))
                    case EndWithoutUtterance():
                        pass  # a repeated end: nothing is owed for it

    def _owe_acknowledgement(self, label: Label) -> None:
        label.acknowledge = True
        self._owed_acknowledgements.append(label)

    # -- writer -----------------------------------------------------------------------

    async def _write(self) -> None:
        async for item in self._passes:
            match item:
                case Acknowledge(label=label):
                    await self._acknowledge(label)
                case Pass(last=last, frames=frames):
                    await self._relay(item)
                    if last:
                        if frames.label.acknowledge:
                            await self._acknowledge(frames.label)
                        self._utterance_done()

    async def _relay(self, item: Pass) -> None:
        """Send the pass's frames: its streams' results, one stream after the other, each
        up to its final result."""
        frames = item.frames
        for stream in item.streams:
            async with stream:
                async for result in stream:
                    for frame in frames.push(result, stream.worker_index):
                        await self._send(frame)
                    if result.is_final:
                        break
                else:
                    raise WorkerError(frames.unfinished)
            self._streams.relayed(stream)
        for frame in frames.finish():
            await self._send(frame)

    async def _acknowledge(self, label: Label) -> None:
        """FunASR's end-of-input acknowledgement, after the utterance's last result."""
        await self._send(end_acknowledgement(mode=label.mode, wav_name=label.wav_name))
        self._owed_acknowledgements.remove(label)

    async def _send(self, text: str) -> None:
        # Shorter than uvicorn's ping timeout, which would otherwise drop a client that
        # stopped reading first, with no close code and no word in the log.
        timeout = self._settings.send_timeout_s
        try:
            with anyio.move_on_after(timeout) as scope:
                await self._websocket.send_text(text)
        except RuntimeError:
            # uvicorn has closed the connection itself and sends nothing more: a protocol
            # error of the client's, or no pong within its --ws-ping-timeout.
            self._closed_under = True
            raise _ClientGone from None
        if scope.cancelled_caught:
            raise ProtocolError(f"the client read no result for {timeout:g} s (ASR_SEND_TIMEOUT)")

    def _utterance_done(self) -> None:
        self._open_utterances -= 1
        if self._open_utterances:
            return
        if self._admission.draining.is_set():
            raise ShuttingDownError("the server is shutting down; reconnect later")
        if self._idle_scope is not None:
            # The reader was waiting untimed while we owed the client a result.
            self._idle_scope.deadline = anyio.current_time() + self._settings.idle_timeout_s

    # -- drain ------------------------------------------------------------------------

    async def _watch_drain(self) -> None:
        """Close at once if idle when the drain starts; else after the final result (the
        writer does that), or when the drain timeout passes, whichever comes first."""
        await self._admission.draining.wait()
        if not self._open_utterances:
            raise ShuttingDownError("the server is shutting down; reconnect later")
        await self._admission.expired.wait()
        raise ShuttingDownError("the server is shutting down; the drain timeout has passed")
