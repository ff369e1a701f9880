"""One session: its task group of a forwarder, a writer (``gateway.session.pipeline``) and
the connections it is served on, each connection its own task group of a reader and a
sender::

    reader:    ws frames -> SessionReader (gateway.session.reader: the parser, the limits,
               the gatherer) -> [events, bounded] -> forwarder
    sender:    [outbox] -> ws frames

Every hand-off is bounded: a slow worker makes ``AudioStream.send`` wait, which fills the
events stream, which stops the reader, which leaves frames unread in uvicorn, which stops
reading the socket, and TCP pushes back on the client. A slow client makes the sender wait,
which fills the outbox, which makes the writer wait, which leaves results unread, which
makes ``send`` wait the same way.

A session lives as long as its first connection, unless it is resumable: then a dropped
connection ends only its own task group, and the session parks until a resume hands it the
next one (``gateway.session.resume.resumability`` says how).

The first task to fail decides how the session ends: an error frame and its close code
(``GatewayError``), or nothing at all when the client has gone.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.funasr.parser import (
    ConfigReceived,
    Event,
    ParserState,
    ResumeRequested,
)
from gateway.funasr.results import ack_message
from gateway.metrics import GatewayMetrics
from gateway.session import transport
from gateway.session.closing import CLOSE_GRACE_S, close_with_error
from gateway.session.outbox import Outbox
from gateway.session.pipeline import Pipeline
from gateway.session.reader import EVENT_BUFFER, ClientGone, SessionReader
from gateway.session.resume.resumability import Resumability
from gateway.session.resume.resumes import Attachment
from gateway.session.resume.token import TokenClaim
from gateway.session.serving import ServedModel, Serving
from shared.errors import GatewayError, ProtocolError, ResumeExpiredError, ShuttingDownError

logger = logging.getLogger(__name__)

ACK_INTERVAL_S = 1.0  # a resumable session's acks, while its audio comes in


class Session:
    """Serves one session, from its first connection until the client leaves for good or
    an error closes it. ``run`` returns a ``ResumeRequested`` when the connection's first
    frame asks to resume another session instead: nothing of this one was opened."""

    def __init__(
        self,
        websocket: WebSocket,
        serving: Serving,
        metrics: GatewayMetrics,
        owner: str = "",
        client: str = "",
        model: ServedModel | None = None,
    ) -> None:
        settings = serving.settings
        self._websocket = websocket  # the current connection's
        self._serving = serving
        self._settings = settings
        self._admission = serving.admission
        self._metrics = metrics
        self._owner = owner
        self._client = client
        self._events_in, events = anyio.create_memory_object_stream[Event](EVENT_BUFFER)
        self._outbox = Outbox()
        self._pipeline = Pipeline(serving, events, self._outbox, self._utterance_done, model)
        self._reader = SessionReader(
            settings,
            metrics,
            self._events_in,
            lambda: self._pipeline.event_taken,
            self._become_resumable,
        )
        self._parser = self._reader.parser
        self._group: anyio.abc.TaskGroup | None = None
        self._ended = False
        self._error: GatewayError | None = None
        self._resume_instead: ResumeRequested | None = None
        # The connection being served: its task group, whether it is still there, whether
        # the server's WebSocket layer closed it (a protocol error, no pong in time).
        self._connection_scope: anyio.CancelScope | None = None
        self._live = True
        self._closed_under = False
        self._attachment: Attachment | None = None  # the current connection's, if a resume's
        self._resumability: Resumability | None = None
        self._session_frame_due = False
        self._resumed = False  # the current connection is a resume's
        self._left = False  # the client closed the connection with a close frame

    async def run(self) -> ResumeRequested | None:
        limit = self._settings.max_session_s
        try:
            async with self._pipeline.streams:
                with anyio.move_on_after(limit) as session_scope:
                    async with anyio.create_task_group() as group:
                        self._group = group
                        for task in (
                            self._serve_connections,
                            self._pipeline.forward,
                            self._pipeline.write,
                            self._watch_drain,
                        ):
                            group.start_soon(self._guard, task)
                if session_scope.cancelled_caught and not self._ended:
                    self._error = ProtocolError(
                        f"the session reached its maximum length of {limit:g} s"
                        " (ASR_MAX_SESSION_SECONDS)"
                    )
        finally:
            self._events_in.close()
            self._pipeline.close()
            self._forget()
        if self._resume_instead is not None:
            return self._resume_instead
        await self._close()
        if self._attachment is not None:
            self._attachment.released.set()
        return None

    async def _close(self) -> None:
        """Tell the client how the session ended, if it is still there to be told."""
        if self._error is not None:
            code = self._error.close_code
            self._metrics.session_errors.labels(str(code)).inc()
            logger.info("closing a session with %d: %s", code, self._error.message)
            if not self._live:
                return  # parked: nobody to tell
            config = self._parser.session_config
            await close_with_error(
                self._websocket,
                self._error,
                mode=config.mode,
                wav_name=config.wav_name,
                owed_acknowledgements=self._pipeline.owed_acknowledgements,
                pending_frames=self._outbox.unsent(),
            )
        elif self._closed_under and self._live:
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
        except (ClientGone, WebSocketDisconnect):
            self._end(None)
        except Exception as exc:
            logger.exception("session task %s failed", getattr(task, "__name__", task))
            self._end(GatewayError(f"internal error: {type(exc).__name__}"))

    def _end(self, error: GatewayError | None) -> None:
        if self._ended:
            return
        self._ended = True
        # Kept without its traceback: the traceback holds the frames of this session's
        # tasks, which hold the session, a cycle that only the (rarely run) cyclic
        # collector would free, with whatever audio those frames held.
        self._error = None if error is None else error.with_traceback(None)
        self._forget()
        assert self._group is not None
        self._group.cancel_scope.cancel()

    def _forget(self) -> None:
        """No resume reaches this session from now on."""
        if self._resumability is not None:
            self._resumability.forget()

    # -- connections --------------------------------------------------------------------

    async def _serve_connections(self) -> None:
        """Serve the first connection, and each resume's after it; without resumability,
        or once the window passes with no resume, the session ends with the connection."""
        while True:
            await self._serve_connection()
            if self._attachment is not None:
                self._attachment.released.set()  # its endpoint may return
                self._attachment = None
            if self._resumability is None:
                raise ClientGone
            if self._left:
                raise ClientGone  # a close frame: the client is done with the session
            attachment = await self._resumability.next_connection(self._metrics)
            if attachment is None:
                self._forget()  # expired from now: the session is closing
                raise ClientGone
            self._websocket, self._attachment = attachment.websocket, attachment
            self._live, self._closed_under, self._resumed = True, False, True
            # Checked in attach; raises if the old connection's sender let frames go since.
            self._outbox.rewind(attachment.last_result)
            self._parser.reconnected()
            self._session_frame_due = True

    async def _serve_connection(self) -> None:
        """Read and send on the current connection until it is gone."""
        async with anyio.create_task_group() as group:
            self._connection_scope = group.cancel_scope
            group.start_soon(self._connection_guard, self._read)
            group.start_soon(self._connection_guard, self._send_frames)

    async def _connection_guard(self, task: Callable[[], Awaitable[None]]) -> None:
        """As ``_guard``, but the client gone ends only the connection: the session decides
        (``_serve_connections``) whether it goes on."""
        try:
            await task()
        except (ClientGone, WebSocketDisconnect):
            self._lose_connection()
        except anyio.BrokenResourceError:
            pass  # the forwarder has stopped: the session is ending
        except GatewayError as exc:
            self._end(exc)
        except Exception as exc:
            logger.exception("connection task %s failed", getattr(task, "__name__", task))
            self._end(GatewayError(f"internal error: {type(exc).__name__}"))

    def _lose_connection(self) -> None:
        self._live = False
        if self._connection_scope is not None:
            self._connection_scope.cancel()

    def attach(
        self, websocket: WebSocket, claim: TokenClaim, last_result: int, owner: str
    ) -> Attachment:
        """A resume's connection, checked against the session (``resumes.Resumable``):
        served next, taking over from the current connection if there is one (a client
        that reconnects knows its old connection is dead before the server does)."""
        state = self._resumability
        if state is None or self._ended:
            raise ResumeExpiredError("the session is no longer held: it ended")
        self._outbox.check_resume(last_result)
        state.claim(claim, last_result, owner, anyio.current_time())
        attachment = state.hand_over(websocket, last_result)
        if self._live:
            transport.abort(self._websocket)
            self._lose_connection()
        return attachment

    def _become_resumable(self) -> None:
        if self._resumability is not None:
            return
        resumes = self._serving.resumes
        self._resumability = Resumability(
            resumes,
            resumes.register(self),
            owner=self._owner,
            client=self._client,
            resumes_per_minute=self._settings.max_resumes_per_minute,
            now=anyio.current_time(),
        )
        self._outbox.number_from_now()
        self._session_frame_due = True
        self._outbox.poke()

    def _session_frame(self) -> str:
        assert self._resumability is not None
        return self._resumability.session_frame(
            resumed=self._resumed,
            utterance=self._reader.utterances,
            samples=self._parser.samples_taken,
            input_ended=self._parser.state is ParserState.ENDED,
            newest_result=self._outbox.newest,
        )

    # -- reader -----------------------------------------------------------------------

    async def _read(self) -> None:
        reader = self._reader
        try:
            while True:
                await reader.room_for_a_frame()
                try:
                    events = await reader.receive(self._websocket, self._heard)
                except ClientGone as gone:
                    self._left = gone.left
                    raise
                resumes = [event for event in events if isinstance(event, ResumeRequested)]
                if resumes:
                    self._resume_instead = resumes[0]
                    self._end(None)
                    return
                configs = any(isinstance(event, ConfigReceived) for event in events)
                if configs and self._admission.draining.is_set():
                    await self._refuse_utterance()
                reader.take(events)
                # Nothing of the frame stays here: a session ends by cancellation, and its
                # tracebacks keep frames' locals until the (rarely run) cyclic collector.
                events = []
        finally:  # audio held back is the session's, not the connection's
            reader.flush()

    def _heard(self) -> None:
        if self._resumability is not None:
            self._resumability.heard()

    async def _refuse_utterance(self) -> None:
        """No new utterance while draining; the ones still owed their results get them
        first (the writer closes the session after the last), within the drain timeout."""
        if not self._reader.open_utterances:
            raise ShuttingDownError("the server is shutting down; reconnect later")
        await anyio.sleep_forever()

    # -- sender -----------------------------------------------------------------------

    async def _send_frames(self) -> None:
        """The outbox's frames on the current connection, in order; a resumable session's
        first frame, and its acks before each result and about once a second."""
        outbox = self._outbox
        acked = (-1, -1)
        next_ack = -math.inf
        while True:
            if self._session_frame_due:
                self._session_frame_due = False
                await self._send(self._session_frame())
                acked = (self._reader.utterances, self._parser.samples_taken)
            resumable = self._resumability is not None
            if resumable and (outbox.next_unsent() is not None or anyio.current_time() >= next_ack):
                taken = (self._reader.utterances, self._parser.samples_taken)
                if taken != acked:
                    await self._send(ack_message(utterance=taken[0], samples=taken[1]))
                    acked = taken
                next_ack = anyio.current_time() + ACK_INTERVAL_S
            frame = outbox.next_unsent()
            if frame is not None:
                number, text = frame
                await self._send(text)
                outbox.sent(number)
                continue
            if self._admission.draining.is_set() and not self._reader.open_utterances:
                # Everything owed is sent: a resume that came for it during the drain too.
                raise ShuttingDownError("the server is shutting down; reconnect later")
            wait = next_ack - anyio.current_time() if resumable else math.inf
            with anyio.move_on_after(max(wait, 0.0)):
                await outbox.changed()

    async def _send(self, text: str) -> None:
        # Shorter than uvicorn's ping timeout, which would otherwise drop a client that
        # stopped reading first, with no close code and no word in the log.
        timeout = self._settings.send_timeout_s
        try:
            sent = await transport.send_within(self._websocket, text, timeout)
        except transport.ClosedUnderUs:
            self._closed_under = True
            raise ClientGone from None
        except transport.ConnectionLost:
            raise ClientGone from None
        if not sent:
            if self._resumability is not None:
                # A client that reads nothing may be behind a dead connection: drop it and
                # let the client come back for its results.
                transport.abort(self._websocket)
                raise ClientGone
            raise ProtocolError(f"the client read no result for {timeout:g} s (ASR_SEND_TIMEOUT)")

    def _utterance_done(self) -> None:
        self._reader.open_utterances -= 1
        if self._reader.open_utterances:
            return
        if self._admission.draining.is_set():
            if self._live:
                raise ShuttingDownError("the server is shutting down; reconnect later")
            return  # parked: a resume within the drain timeout gets the results first
        self._reader.results_sent()

    # -- drain ------------------------------------------------------------------------

    async def _watch_drain(self) -> None:
        """Close at once if idle when the drain starts; else after the final result (the
        writer does that), or when the drain timeout passes, whichever comes first."""
        await self._admission.draining.wait()
        # A parked session with results still to send waits for its resume (the sender
        # closes once it has sent them), up to the drain timeout.
        if not self._reader.open_utterances and (self._live or not self._outbox.unsent()):
            raise ShuttingDownError("the server is shutting down; reconnect later")
        await self._admission.expired.wait()
        raise ShuttingDownError("the server is shutting down; the drain timeout has passed")
