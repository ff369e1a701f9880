"""A session's two inner tasks, between the parser's events and the frames the client gets:

::

    forwarder: [events] -> the utterance's logic (gateway.session.utterance) -> its actions:
               pool streams opened, fed and finished; passes handed on -> [passes, bounded]
    writer:    [passes] -> each pass's stream results, in order -> ResultFrames -> [outbox]
               (a background pass, a 2pass sentence's offline decode, is read beside the
               passes after it, and its frames go out when it is done)

Each mode's logic is sans I/O: it turns events into actions, and the forwarder only carries
them out (``SessionStreams``), answering its questions (the VAD's answer to a piece, where
to cut long audio) before it reads the next event. Neither task belongs to a connection:
while a resumable session is parked they go on, and the outbox bounds what waits.
"""

from __future__ import annotations

import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from gateway.funasr.config import SessionConfig
from gateway.funasr.known_speakers import Clip, EnrolmentError, decode_clips
from gateway.funasr.parser import (
    AudioReceived,
    ConfigReceived,
    ConfigUpdated,
    EndOfUtterance,
    EndWithoutUtterance,
    Event,
    ResumeRequested,
)
from gateway.funasr.results import Label, end_acknowledgement
from gateway.session.outbox import Outbox
from gateway.session.serving import ServedModel, Serving
from gateway.session.streams import Acknowledge, Pass, SessionStreams
from gateway.session.utterance import Utterance, check_served, utterance_for
from shared.errors import ProtocolError, WorkerError

PASS_BUFFER = 1  # passes handed to the writer ahead of the one it is relaying
# Background passes pending at once (2pass sentences whose offline decode is not yet sent);
# one more waits until the oldest is done, and with it the partials behind it.
PASSES_BEHIND = 4


class Pipeline:
    """``events``: the reader's, which ``forward`` takes one at a time (``event_taken`` is
    set at each: the reader waits on it for room); ``utterance_done``: called by the writer
    after an utterance's last frame (and its acknowledgement) is in the outbox."""

    def __init__(
        self,
        serving: Serving,
        events: MemoryObjectReceiveStream[Event],
        outbox: Outbox,
        utterance_done: Callable[[], None],
        model: ServedModel | None = None,
    ) -> None:
        self._events = events
        self._passes_in, self._passes = anyio.create_memory_object_stream[Pass | Acknowledge](
            PASS_BUFFER
        )
        self.streams = SessionStreams(serving, self._passes_in, model)
        self._outbox = outbox
        self._utterance_done = utterance_done
        self.event_taken = anyio.Event()
        # Ends that asked for the acknowledgement and have not had it, oldest first.
        self.owed_acknowledgements: list[Label] = []
        # Frames are made and put in the outbox under this: a background pass's frames
        # (a 2pass-offline frame and the partials it resends) go in together, never split
        # by a partial, so what the resend holds is exactly what came before it.
        self._putting = anyio.Lock()
        self._behind: deque[anyio.Event] = deque()  # the background passes' ends, oldest first

    def close(self) -> None:
        """Close both streams and drop what waits in them: a closed memory stream keeps its
        buffer, and a session is freed only by the cyclic collector (its tasks' exceptions
        hold their frames), which the tuned collector runs rarely; an abandoned session's
        unread audio (up to ``EVENT_BUFFER`` frames of ASR_MAX_FRAME_BYTES) stayed that long."""
        for stream in (self._events, self._passes):
            _drop_buffered(stream)
        for end in (self._passes_in, self._passes, self._events):
            end.close()
        self._utterance_done = _nothing  # the session's method: a cycle through the session

    # -- forwarder --------------------------------------------------------------------

    async def forward(self) -> None:
        utterance: Utterance | None = None
        event: Event | None = None
        try:
            async with self._passes_in:
                async for event in self._events:
                    self.event_taken.set()
                    self.event_taken = anyio.Event()
                    utterance = await self._carry_out(utterance, event)
                    event = None  # a frame of audio, not kept while the next is awaited
        except BaseException as exc:
            event = None
            # A session ends by cancellation, and the traceback keeps the frames under this
            # one, with the audio being carried out, until the cyclic collector runs (the
            # tuned one runs rarely): they are done with, so let go of their locals. (Only
            # this task's frames are there: an error that reaches several tasks is raised
            # as a copy in each, see GatewayError.copy.)
            traceback.clear_frames(exc.__traceback__)
            raise

    async def _carry_out(self, utterance: Utterance | None, event: Event) -> Utterance | None:
        """One event; the utterance open after it."""
        streams = self.streams
        match event:
            case ConfigReceived(config=config):
                streams.choose(config.model)
                utterance = await self._start(config)
            case AudioReceived(pcm=pcm):
                assert utterance is not None, "the parser lets no audio before a config"
                streams.heard()
                await streams.carry_out(utterance, utterance.audio(pcm))
            case ConfigUpdated(config=config):
                assert utterance is not None, "the parser updates only an utterance"
                if streams.choose(config.model):  # only before audio: else 1008
                    streams.drop_unheard()
                    utterance = await self._start(config)
                else:
                    utterance.update(config)
            case EndOfUtterance(acknowledge=acknowledge):
                assert utterance is not None, "the parser lets no end before a config"
                if acknowledge:
                    # Set before the last pass can finish: the writer reads it then.
                    self._owe_acknowledgement(utterance.label)
                await streams.carry_out(utterance, utterance.end())
                utterance = None
            case EndWithoutUtterance(acknowledge=True, config=config):
                label = Label(config.mode, config.wav_name)
                self._owe_acknowledgement(label)
                await self._passes_in.send(Acknowledge(label))
            case EndWithoutUtterance() | ResumeRequested():
                pass  # a repeated end: nothing is owed for it (a resume is never queued)
        return utterance

    async def _start(self, config: SessionConfig) -> Utterance:
        """The utterance ``config`` starts, its opening carried out. An offline one with
        ``spk`` gets its config's known speakers' clips decoded first, off the event loop
        (their seconds were counted at the config, ``SessionLimits``); a config refused
        (``check_served``) has none decoded."""
        streams = self.streams
        settings = streams.utterance_settings()
        check_served(config, settings)
        clips: tuple[Clip, ...] = ()
        if config.spk and config.mode == "offline" and config.spk_refs:
            try:
                clips = await anyio.to_thread.run_sync(
                    decode_clips, config.spk_names, config.spk_refs
                )
            except EnrolmentError as error:
                raise ProtocolError(str(error)) from None
        utterance = utterance_for(config, settings, vad=streams.vad, clips=clips)
        await streams.carry_out(utterance, utterance.start())
        return utterance

    def _owe_acknowledgement(self, label: Label) -> None:
        label.acknowledge = True
        self.owed_acknowledgements.append(label)

    # -- writer -----------------------------------------------------------------------

    async def write(self) -> None:
        try:
            async with anyio.create_task_group() as group:
                async for item in self._passes:
                    match item:
                        case Acknowledge(label=label):
                            await self._acknowledge(label)
                        case Pass(last=last, frames=frames):
                            if frames.background:
                                await self._behind_room()
                                group.start_soon(self._relay_behind, item, *self._queue_behind())
                            else:
                                await self._relay(item)
                            if last:
                                await self._caught_up()
                                if frames.label.acknowledge:
                                    await self._acknowledge(frames.label)
                                self._utterance_done()
        except BaseExceptionGroup as exc:
            # The session maps the error of one of its tasks to a close code.
            raise _first_error(exc) from None

    async def _relay(self, item: Pass) -> None:
        """Put the pass's frames in the outbox: its streams' results, one stream after the
        other, each up to its final result."""
        frames = item.frames
        for stream in item.streams:
            async with stream:
                async for result in stream:
                    async with self._putting:
                        for frame in frames.push(result, stream.worker_index):
                            await self._outbox.put(frame)
                    if result.is_final:
                        break
                else:
                    raise WorkerError(frames.unfinished)
            self.streams.relayed(stream)
        async with self._putting:
            for frame in frames.finish():
                await self._outbox.put(frame)

    def _queue_behind(self) -> tuple[anyio.Event | None, anyio.Event]:
        """A background pass's place: the end of the one before it (None: none pending),
        and its own."""
        before = self._behind[-1] if self._behind else None
        self._behind.append(anyio.Event())
        return before, self._behind[-1]

    async def _relay_behind(
        self, item: Pass, before: anyio.Event | None, done: anyio.Event
    ) -> None:
        """A background pass: its streams read as their results come, its frames put in
        the outbox once they are all in and the background pass before it is done."""
        frames = item.frames
        made: list[str] = []
        for stream in item.streams:
            async with stream:
                async for result in stream:
                    made += frames.push(result, stream.worker_index)
                    if result.is_final:
                        break
                else:
                    raise WorkerError(frames.unfinished)
            self.streams.relayed(stream)
        if before is not None:
            await before.wait()
        async with self._putting:
            for frame in made + frames.finish():
                await self._outbox.put(frame)
        done.set()

    async def _behind_room(self) -> None:
        while self._behind and self._behind[0].is_set():
            self._behind.popleft()
        if len(self._behind) >= PASSES_BEHIND:
            await self._behind.popleft().wait()

    async def _caught_up(self) -> None:
        """Every background pass's frames are in the outbox (each waits for the one before)."""
        if self._behind:
            await self._behind[-1].wait()
            self._behind.clear()

    async def _acknowledge(self, label: Label) -> None:
        """FunASR's end-of-input acknowledgement, after the utterance's last result."""
        await self._outbox.put(end_acknowledgement(mode=label.mode, wav_name=label.wav_name))
        self.owed_acknowledgements.remove(label)


def _drop_buffered(stream: MemoryObjectReceiveStream[Any]) -> None:
    while True:
        try:
            stream.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception in ``group`` that is not a cancellation, else the first."""
    cancelled = anyio.get_cancelled_exc_class()
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending[:0] = exc.exceptions
        else:
            leaves.append(exc)
    return next((exc for exc in leaves if not isinstance(exc, cancelled)), leaves[0])


def _nothing() -> None:
    pass
