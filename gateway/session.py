"""One WebSocket connection: one task group of a reader, a forwarder and a writer.

::

    reader:    ws frames -> ProtocolParser -> [events, bounded]
    forwarder: [events] -> ChunkCutter -> pool stream (one per utterance) -> [utterances, bounded]
    writer:    [utterances] -> each stream's results, in order -> ws text frames

In 2pass, the forwarder also finds sentence ends: with the FSMN-VAD pool when there is
one (each piece goes to a VAD stream, whose answer the forwarder waits for before the
next piece), else with the energy endpointer.

Every hand-off is bounded: a slow worker makes ``AudioStream.send`` wait, which fills the
events stream, which stops the reader, which leaves frames unread in uvicorn, which stops
reading the socket, and TCP pushes back on the client. A slow client makes the writer wait,
which leaves results unread, which makes ``send`` wait the same way.

The first task to fail decides how the session ends: an error frame and its close code
(``GatewayError``), or nothing at all when the client has gone.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import anyio
import anyio.abc
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway import transport
from gateway.admission import Admission
from gateway.budget import AudioBudget, HeldAudio
from gateway.chunker import ChunkCutter
from gateway.endpointer import EnergyEndpointer
from gateway.long_audio import find_segments
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
    SessionConfig,
)
from gateway.ratelimit import TokenBucket, frame_cost
from gateway.resample import PcmResampler, resampled_bytes
from gateway.results import end_acknowledgement, error_message, result_message
from gateway.segment import join_texts
from gateway.settings import GatewaySettings
from gateway.vad import VAD_PIECE_BYTES, SpeechEnded, SpeechStarted, vad_events
from shared.errors import GatewayError, ProtocolError, ShuttingDownError, WorkerError
from shared.messages import SAMPLE_RATE, StreamResult
from workers.pool import WorkerPool
from workers.stream import AudioStream

logger = logging.getLogger(__name__)

EVENT_BUFFER = 4  # parsed frames (up to ASR_MAX_FRAME_BYTES each) read ahead
UTTERANCE_BUFFER = 1  # utterances opened ahead of the one the writer is relaying
CLOSE_GRACE_S = 5.0  # to send the error frame and the close frame to a slow client
MAX_REASON_BYTES = 123  # a close frame's reason must fit in a control frame


class _ClientGone(Exception):
    """The client closed the connection or dropped it: nobody to tell anything."""


@dataclass(slots=True, eq=False)  # one per utterance, told apart by identity
class _Label:
    """What an utterance's messages say about it, shared by the forwarder (which changes
    ``wav_name`` when a frame sets it, and ``acknowledge`` at an ``is_end`` end) and the
    writer (which reads them as it sends)."""

    mode: str
    wav_name: str
    acknowledge: bool = False  # the end asked for the end-of-input acknowledgement

    @classmethod
    def of(cls, config: SessionConfig) -> _Label:
        return cls(config.mode, config.wav_name)


@dataclass(slots=True)
class _Utterance:
    """One utterance between its config and its end, as the forwarder holds it."""

    config: SessionConfig
    label: _Label
    resampler: PcmResampler | None = None  # audio_fs other than 16 kHz
    stream: AudioStream | None = None  # online, 2pass: opened at the config; offline: at the end
    cutter: ChunkCutter | None = None
    buffer: bytearray = field(default_factory=bytearray)  # offline: all; 2pass: this sentence
    # 2pass only: where sentences end, from the VAD pool or else from the endpointer.
    vad: AudioStream | None = None
    endpointer: EnergyEndpointer | None = None
    sentence_origin: int = 0  # 2pass: bytes of the utterance before this sentence
    speech_start: int | None = None  # VAD: where this sentence's speech began (utterance)


Role = Literal["online", "offline", "2pass-online", "2pass-offline"]


@dataclass(frozen=True, slots=True)
class _Opened:
    """A pool stream, handed from the forwarder to the writer: a whole utterance (online,
    offline), or one 2pass sentence's streaming pass or its offline pass."""

    config: SessionConfig
    label: _Label
    stream: AudioStream
    role: Role
    last: bool  # the utterance's last stream: its result carries is_final, and ends it
    text_is_delta: bool
    offset_ms: int = 0  # where the stream's audio starts in the utterance (its timestamps)


@dataclass(frozen=True, slots=True)
class _Segments:
    """An offline utterance longer than ``ASR_MAX_SEGMENT_SECONDS``: one pool stream per
    segment, decoded at once, and one result for them all."""

    config: SessionConfig
    label: _Label
    streams: tuple[AudioStream, ...]
    offsets_ms: tuple[int, ...]  # where each segment starts in the utterance
    text_is_delta: bool


@dataclass(frozen=True, slots=True)
class _Acknowledge:
    """An end with no utterance open that asked for its acknowledgement: sent in order,
    after the results of the utterances before it."""

    label: _Label


def close_reason(message: str) -> str:
    """``message`` cut to what a close frame can carry, on a character boundary."""
    return message.encode("utf-8")[:MAX_REASON_BYTES].decode("utf-8", "ignore")


async def close_with_error(
    websocket: WebSocket,
    error: GatewayError,
    *,
    mode: str = "2pass",
    wav_name: str = "",
    owed_acknowledgements: Sequence[_Label] = (),
) -> None:
    """Send our error frame, then close with the error's code; a gone client is fine.

    ``owed_acknowledgements``: ends the client sent with ``is_end`` and still waits to have
    acknowledged; each is answered first, failed (FunASR's Python client then raises the
    error at once, rather than waiting out its timeout)."""
    code = error.close_code
    with anyio.move_on_after(CLOSE_GRACE_S, shield=True) as grace:
        try:
            for owed in owed_acknowledgements:
                await websocket.send_text(
                    end_acknowledgement(mode=owed.mode, wav_name=owed.wav_name, error=error.message)
                )
            await websocket.send_text(error_message(code, error.message, mode, wav_name))
            await websocket.close(code, close_reason(error.message))
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the client left first, or the connection is already closed
        await transport.drained(websocket)
    if grace.cancelled_caught:
        # A client that reads nothing: our frames would wait behind its unread results
        # for as long as TCP keeps the connection, and the server with them.
        transport.abort(websocket)


def timing_fields(result: StreamResult, worker: int) -> dict[str, object]:
    """Our additive result fields, read by the benchmark; FunASR clients ignore them."""
    return {
        "seq": result.seq,
        "queue_ms": round(result.queue_ms, 3),
        "compute_ms": round(result.compute_ms, 3),
        "batch_size": result.batch_size,
        "worker": worker,
    }


def timestamp_field(timestamps: tuple[tuple[int, int], ...], offset_ms: int) -> str:
    """FunASR's ``timestamp``: ``"[[start,end],...]"`` in ms from the utterance's start
    (a 2pass sentence's times are its model's plus where its audio began)."""
    shifted = [[start + offset_ms, end + offset_ms] for start, end in timestamps]
    return json.dumps(shifted, separators=(",", ":"))


class Session:
    """Serves one accepted WebSocket until the client leaves or an error closes it."""

    def __init__(
        self,
        websocket: WebSocket,
        pool: WorkerPool,
        settings: GatewaySettings,
        admission: Admission,
        metrics: GatewayMetrics,
        *,
        offline_pool: WorkerPool | None = None,
        vad_pool: WorkerPool | None = None,
        budget: AudioBudget | None = None,
    ) -> None:
        self._websocket = websocket
        self._pool = pool
        self._offline_pool = offline_pool
        self._vad_pool = vad_pool
        self._settings = settings
        self._admission = admission
        self._metrics = metrics
        self._parser = ProtocolParser(settings.max_frame_bytes, settings.max_text_bytes)
        self._events_in, self._events = anyio.create_memory_object_stream[Event](EVENT_BUFFER)
        self._opened_in, self._opened = anyio.create_memory_object_stream[
            _Opened | _Segments | _Acknowledge
        ](UTTERANCE_BUFFER)
        # Audio held whole in this process (offline utterances, 2pass sentences), counted
        # against the gateway-wide ASR_MAX_BUFFERED_SECONDS.
        self._held = HeldAudio(budget)
        self._streams: set[AudioStream] = set()  # open pool streams, closed at the end
        self._open_utterances = 0  # configs received whose final result is not sent yet
        # Ends that asked for the acknowledgement and have not had it, oldest first.
        self._owed_acknowledgements: list[_Label] = []
        self._audio_bytes = 0
        self._idle_scope: anyio.CancelScope | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._ended = False
        self._error: GatewayError | None = None
        # What one client may cost the others: frames counted in a bucket holding a
        # second's worth (gateway.ratelimit); the config due within ASR_CONFIG_TIMEOUT of
        # the start, each config's first audio within ASR_FIRST_AUDIO_TIMEOUT.
        rate = settings.max_frames_per_s
        self._started = anyio.current_time()
        self._frames = TokenBucket(rate, max(1.0, rate), self._started)
        self._configured_at: float | None = None  # the last config, until its first audio
        self._closed_under = False  # the server's WebSocket layer closed the connection

    async def run(self) -> None:
        limit = self._settings.max_session_s
        try:
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
            for stream in list(self._streams):
                await stream.aclose()  # never blocks: tells the worker to drop the stream
            self._streams.clear()
            self._held.release_all()
            for end in (self._events_in, self._events, self._opened_in, self._opened):
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
        parser = self._parser
        async with self._events_in:
            while True:
                message = await self._receive()
                text, data = message.get("text"), message.get("bytes")
                if text is not None:
                    self._count_frame(None)
                    events = parser.receive_text(text)
                elif data is not None:
                    self._count_frame(len(data))
                    events = parser.receive_bytes(data)
                else:
                    continue
                for event in events:
                    if isinstance(event, ConfigReceived) and self._admission.draining.is_set():
                        await self._refuse_utterance()
                    self._check(event)
                    await self._events_in.send(event)

    async def _receive(self) -> Message:
        """The client's next frame: within the idle timeout unless we owe it a result; the
        first config, and each config's first audio, within their own timeouts too."""
        settings = self._settings
        idle = settings.idle_timeout_s
        owed = self._parser.state is ParserState.ENDED and self._open_utterances > 0
        deadline = math.inf if owed else anyio.current_time() + idle
        late = f"no frame from the client for {idle:g} s (ASR_IDLE_TIMEOUT)"
        if self._parser.state is ParserState.AWAITING_CONFIG:
            due = self._started + settings.config_timeout_s
            if due < deadline:
                wait = settings.config_timeout_s
                deadline, late = due, f"no config within {wait:g} s (ASR_CONFIG_TIMEOUT)"
        elif self._configured_at is not None:
            due = self._configured_at + settings.first_audio_timeout_s
            if due < deadline:
                wait = settings.first_audio_timeout_s
                deadline = due
                late = f"no audio within {wait:g} s of the config (ASR_FIRST_AUDIO_TIMEOUT)"
        message: Message | None = None
        with anyio.CancelScope(deadline=deadline) as scope:
            self._idle_scope = scope
            message = await self._websocket.receive()
        self._idle_scope = None
        if message is None:
            raise ProtocolError(late)
        if message["type"] == "websocket.disconnect":
            raise _ClientGone
        return message

    def _count_frame(self, size: int | None) -> None:
        """One frame of ``size`` bytes (None: text) against ASR_MAX_FRAMES_PER_SECOND."""
        if size is not None:
            size = resampled_bytes(size, self._parser.session_config.audio_fs)
        if not self._frames.take(frame_cost(size), anyio.current_time()):
            raise ProtocolError(
                f"more than {self._settings.max_frames_per_s:g} frames a second"
                " (ASR_MAX_FRAMES_PER_SECOND); send audio in frames of 20 ms or more"
            )

    async def _refuse_utterance(self) -> None:
        """No new utterance while draining; the ones still owed their results get them
        first (the writer closes the session after the last), within the drain timeout."""
        if not self._open_utterances:
            raise ShuttingDownError("the server is shutting down; reconnect later")
        await anyio.sleep_forever()

    def _check(self, event: Event) -> None:
        """What the parser cannot know: the modes we serve, the session's length."""
        match event:
            case ConfigReceived(config=config):
                self._open_utterances += 1
                self._metrics.utterances.labels(config.mode).inc()
                self._configured_at = anyio.current_time()
            case AudioReceived(pcm=pcm):
                self._configured_at = None
                config = self._parser.session_config
                self._audio_bytes += resampled_bytes(len(pcm), config.audio_fs)
                if self._audio_bytes > self._settings.max_session_bytes:
                    raise ProtocolError(
                        f"the session sent more than {self._settings.max_session_s:g} s"
                        " of audio (ASR_MAX_SESSION_SECONDS)"
                    )
            case EndOfUtterance():
                self._configured_at = None  # an empty utterance: nothing more is due
            case ConfigUpdated() | EndWithoutUtterance():
                pass

    # -- forwarder --------------------------------------------------------------------

    async def _forward(self) -> None:
        utterance: _Utterance | None = None
        async with self._opened_in:
            async for event in self._events:
                match event:
                    case ConfigReceived(config=config):
                        utterance = _Utterance(config, _Label.of(config))
                        if config.audio_fs != SAMPLE_RATE:
                            utterance.resampler = PcmResampler(config.audio_fs)
                        if config.mode == "online":
                            await self._open_streaming(utterance, "online")
                        elif config.mode == "2pass":
                            await self._open_streaming(utterance, "2pass-online")
                            if self._vad_pool is not None:
                                utterance.vad = self._vad_pool.open_stream(config.stream_options())
                                self._streams.add(utterance.vad)
                            else:
                                utterance.endpointer = EnergyEndpointer(
                                    self._settings.endpoint, self._settings.max_segment_bytes
                                )
                    case AudioReceived(pcm=pcm):
                        assert utterance is not None, "the parser lets no audio before a config"
                        if utterance.resampler is not None:
                            pcm = utterance.resampler.push(pcm)
                        await self._audio(utterance, pcm)
                    case ConfigUpdated(config=config):
                        # From now on: the name on results, the hotwords of decodes to come.
                        assert utterance is not None, "the parser updates only an utterance"
                        utterance.config = config
                        utterance.label.wav_name = config.wav_name
                    case EndOfUtterance(acknowledge=acknowledge):
                        assert utterance is not None, "the parser lets no end before a config"
                        if acknowledge:
                            # Set before the last stream can finish: the writer reads it then.
                            utterance.label.acknowledge = True
                            self._owed_acknowledgements.append(utterance.label)
                        if utterance.resampler is not None:
                            await self._audio(utterance, utterance.resampler.flush())
                        await self._finish(utterance)
                        utterance = None
                    case EndWithoutUtterance(acknowledge=True, config=config):
                        label = _Label(config.mode, config.wav_name, acknowledge=True)
                        self._owed_acknowledgements.append(label)
                        await self._opened_in.send(_Acknowledge(label))
                    case EndWithoutUtterance():
                        pass  # a repeated end: nothing is owed for it

    async def _audio(self, utterance: _Utterance, pcm: bytes) -> None:
        """16 kHz PCM of the utterance, to its passes as its mode has them."""
        if utterance.vad is not None:
            await self._two_pass_vad_audio(utterance, pcm)
        elif utterance.endpointer is not None:
            await self._two_pass_audio(utterance, pcm)
        else:
            await self._stream_audio(utterance, pcm)
            if utterance.config.mode == "offline":
                self._hold(utterance, pcm)

    def _hold(self, utterance: _Utterance, pcm: bytes) -> None:
        """Keep ``pcm`` in the utterance's buffer, within the gateway-wide budget (else
        1013); each session's share is bounded by ASR_MAX_SESSION_SECONDS as well."""
        self._held.take(len(pcm))
        utterance.buffer += pcm

    @staticmethod
    async def _stream_audio(utterance: _Utterance, pcm: bytes) -> None:
        if utterance.cutter is not None and utterance.stream is not None:
            for chunk in utterance.cutter.push(pcm):
                await utterance.stream.send(chunk)

    async def _two_pass_audio(self, utterance: _Utterance, pcm: bytes) -> None:
        """Split ``pcm`` at the sentence ends the endpointer finds in it: each sentence's
        bytes go to its own streaming pass and its own offline pass, none to both."""
        assert utterance.endpointer is not None
        start = 0
        for end in utterance.endpointer.push(pcm):
            # ``end`` counts from the sentence's start; ``buffer`` holds its earlier bytes.
            take = end.offset - len(utterance.buffer)
            piece = pcm[start : start + take]
            await self._stream_audio(utterance, piece)
            self._hold(utterance, piece)
            start += take
            await self._end_sentence(utterance, last=False, speech_start=end.speech_start)
        rest = pcm[start:]
        await self._stream_audio(utterance, rest)
        self._hold(utterance, rest)

    async def _two_pass_vad_audio(self, utterance: _Utterance, pcm: bytes) -> None:
        """Send ``pcm`` to the VAD and the streaming pass piece by piece; a sentence ends
        after the piece in which the VAD saw its end (``gateway/vad.py``), or once it
        reaches ASR_MAX_SEGMENT_SECONDS without one."""
        vad = utterance.vad
        assert vad is not None
        limit = self._settings.max_segment_bytes
        start = 0
        while start < len(pcm):
            room = limit - len(utterance.buffer)  # > 0: a full sentence ends at once
            piece = pcm[start : start + min(VAD_PIECE_BYTES, room)]
            start += len(piece)
            await vad.send(piece)
            await self._stream_audio(utterance, piece)  # meanwhile, the VAD works
            self._hold(utterance, piece)
            for event in vad_events((await vad.receive()).text):
                match event:
                    case SpeechStarted(at_byte=at):
                        utterance.speech_start = at
                    case SpeechEnded() if utterance.buffer:
                        await self._end_sentence(
                            utterance, last=False, speech_start=self._vad_speech_start(utterance)
                        )
                        utterance.speech_start = None
            if len(utterance.buffer) >= limit:
                # No pause the VAD took for an end: cut at the limit, as FunASR's VAD does
                # at max_single_segment_time. The next sentence starts mid-speech.
                await self._end_sentence(
                    utterance, last=False, speech_start=self._vad_speech_start(utterance)
                )
                utterance.speech_start = None

    @staticmethod
    def _vad_speech_start(utterance: _Utterance) -> int | None:
        """The VAD's speech start of this sentence, counted from the sentence's start."""
        if utterance.speech_start is None:
            return None
        return max(0, utterance.speech_start - utterance.sentence_origin)

    def _pool_for(self, config: SessionConfig) -> WorkerPool:
        """`offline` utterances go to the offline model when one is configured."""
        if config.mode == "offline" and self._offline_pool is not None:
            return self._offline_pool
        return self._pool

    async def _open(
        self,
        config: SessionConfig,
        label: _Label,
        pool: WorkerPool,
        role: Role,
        last: bool,
        offset_ms: int = 0,
    ) -> AudioStream:
        stream = pool.open_stream(config.stream_options())
        self._streams.add(stream)
        opened = _Opened(config, label, stream, role, last, pool.text_is_delta, offset_ms)
        await self._opened_in.send(opened)
        return stream

    async def _open_streaming(self, utterance: _Utterance, role: Role) -> None:
        config = utterance.config
        utterance.stream = await self._open(
            config, utterance.label, self._pool, role, last=role == "online"
        )
        utterance.cutter = ChunkCutter(config.chunk_bytes)

    async def _finish(self, utterance: _Utterance) -> None:
        config = utterance.config
        if config.mode == "2pass":
            if utterance.vad is not None:
                speech_start = self._vad_speech_start(utterance)
                await utterance.vad.aclose()  # its last answers are of no use now
                self._streams.discard(utterance.vad)
            else:
                assert utterance.endpointer is not None
                speech_start = utterance.endpointer.speech_start
            await self._end_sentence(utterance, last=True, speech_start=speech_start)
            return
        if utterance.cutter is not None and utterance.stream is not None:
            await utterance.stream.finish(utterance.cutter.flush())
            return
        # Offline: the whole utterance in one go, as FunASR's offline server decodes it,
        # unless it is longer than ASR_MAX_SEGMENT_SECONDS: then in segments cut at pauses.
        audio, utterance.buffer = utterance.buffer, bytearray()
        pool = self._pool_for(config)
        segments = await find_segments(
            audio,
            self._settings.max_segment_bytes,
            self._vad_pool,
            self._settings.endpoint.threshold,
        )
        if len(segments) == 1:
            stream = await self._open(config, utterance.label, pool, "offline", last=True)
            await stream.finish(audio)
        else:
            opened: list[AudioStream] = []
            for _ in segments:
                opened.append(pool.open_stream(config.stream_options()))
                self._streams.add(opened[-1])
            streams = tuple(opened)
            offsets = tuple(segment.start_ms for segment in segments)
            await self._opened_in.send(
                _Segments(config, utterance.label, streams, offsets, pool.text_is_delta)
            )
            whole = memoryview(audio)
            for stream, segment in zip(streams, segments, strict=True):
                await stream.finish(whole[segment.start : segment.end])
            whole.release()
        self._held.give(len(audio))

    async def _end_sentence(
        self, utterance: _Utterance, last: bool, speech_start: int | None
    ) -> None:
        """2pass: close this sentence's streaming pass, decode its audio (the buffer) whole,
        by the offline model when one is configured, and, unless the utterance ended, start
        the next sentence's streaming pass from a fresh state.

        The offline pass starts ``preroll_ms`` before ``speech_start`` (bytes from the
        sentence's start; None: no speech was detected, so all of it): a long silence
        before the speech would only cost decoding time, as in FunASR's 2pass.
        """
        assert utterance.stream is not None
        assert utterance.cutter is not None
        await utterance.stream.finish(utterance.cutter.flush())
        sentence, utterance.buffer = bytes(utterance.buffer), bytearray()
        skip = 0
        if speech_start is not None:
            preroll = self._settings.endpoint.preroll_ms * SAMPLE_RATE // 1000 * 2
            skip = min(max(0, speech_start - preroll), len(sentence)) // 2 * 2
        offset_ms = (utterance.sentence_origin + skip) * 1000 // (SAMPLE_RATE * 2)
        utterance.sentence_origin += len(sentence)
        pool = self._offline_pool or self._pool
        stream = await self._open(
            utterance.config, utterance.label, pool, "2pass-offline", last, offset_ms
        )
        await stream.finish(sentence[skip:])
        self._held.give(len(sentence))
        if not last:
            await self._open_streaming(utterance, "2pass-online")

    # -- writer -----------------------------------------------------------------------

    async def _write(self) -> None:
        async for opened in self._opened:
            match opened:
                case _Acknowledge(label=label):
                    await self._acknowledge(label)
                    continue
                case _Segments(label=label):
                    await self._relay_segments(opened)
                    last = True
                case _Opened(label=label, last=last):
                    async with opened.stream:
                        await self._relay(opened)
                    self._streams.discard(opened.stream)
            if last:
                if label.acknowledge:
                    await self._acknowledge(label)
                self._utterance_done()

    async def _acknowledge(self, label: _Label) -> None:
        """FunASR's end-of-input acknowledgement, after the utterance's last result."""
        await self._send(end_acknowledgement(mode=label.mode, wav_name=label.wav_name))
        self._owed_acknowledgements.remove(label)

    async def _relay(self, opened: _Opened) -> None:
        """Send one stream's results. online: each non-empty partial, then the final.
        2pass-online: each non-empty partial, never final (the sentence's offline pass
        follows). offline, 2pass-offline: one result with the whole text."""
        config, worker = opened.config, opened.stream.worker_index
        texts: list[str] = []
        queue_ms = compute_ms = 0.0
        async for result in opened.stream:
            if opened.role == "online":
                if result.text or result.is_final or config.timing:
                    await self._send(
                        result_message(
                            mode="online",
                            text=result.text,
                            wav_name=opened.label.wav_name,
                            is_final=result.is_final,
                            extra=timing_fields(result, worker),
                        )
                    )
            elif opened.role == "2pass-online":
                if result.text or config.timing:
                    await self._send(
                        result_message(
                            mode="2pass-online",
                            text=result.text,
                            wav_name=opened.label.wav_name,
                            is_final=False,
                            extra=timing_fields(result, worker),
                        )
                    )
            else:
                texts.append(result.text)
                queue_ms += result.queue_ms
                compute_ms += result.compute_ms
            if not result.is_final:
                continue
            if opened.role in ("offline", "2pass-offline"):
                whole = "".join(texts) if opened.text_is_delta else result.text
                extra = timing_fields(result, worker)
                # The sums over the utterance's pieces: its whole queue and compute time.
                extra.update(queue_ms=round(queue_ms, 3), compute_ms=round(compute_ms, 3))
                if result.timestamps:
                    extra["timestamp"] = timestamp_field(result.timestamps, opened.offset_ms)
                await self._send(
                    result_message(
                        mode=opened.role,
                        text=whole,
                        wav_name=opened.label.wav_name,
                        is_final=opened.last,
                        extra=extra,
                    )
                )
            return
        raise WorkerError("the stream ended without its final result")

    async def _relay_segments(self, segments: _Segments) -> None:
        """One offline result for an utterance decoded in segments: their texts joined as
        FunASR joins its VAD segments', their timestamps moved to where each starts."""
        texts: list[str] = []
        timestamps: list[tuple[int, int]] = []
        queue_ms = compute_ms = 0.0
        final: StreamResult | None = None
        for stream, offset_ms in zip(segments.streams, segments.offsets_ms, strict=True):
            async with stream:
                pieces: list[str] = []
                final = None
                async for result in stream:
                    pieces.append(result.text)
                    queue_ms += result.queue_ms
                    compute_ms += result.compute_ms
                    if result.is_final:
                        final = result
                        break
            self._streams.discard(stream)
            if final is None:
                raise WorkerError("a segment's stream ended without its final result")
            texts.append("".join(pieces) if segments.text_is_delta else final.text)
            timestamps += [(start + offset_ms, end + offset_ms) for start, end in final.timestamps]
        assert final is not None, "an utterance has at least two segments here"
        extra = timing_fields(final, segments.streams[-1].worker_index)
        extra.update(queue_ms=round(queue_ms, 3), compute_ms=round(compute_ms, 3))
        if timestamps:
            extra["timestamp"] = timestamp_field(tuple(timestamps), 0)
        await self._send(
            result_message(
                mode="offline",
                text=join_texts(texts),
                wav_name=segments.label.wav_name,
                is_final=True,
                extra=extra,
            )
        )

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
