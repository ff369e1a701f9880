"""The pool streams of one session: opened, fed and finished as its utterances' actions
say (``gateway.session.utterance.actions``), handed to the writer pass by pass, and every one
still open closed at the session's end, with the audio it held given back.

The pools are those of the session's model (``choose``): the URL's ``?model=``, else the
first config's ``model``, else the default. Until the session's first audio, a config may
still name another, a new utterance's or one inside the open utterance (OpenAI's realtime
session names its model in an update after the first turn is open); from then on the
session stays on its model. So that nothing has gone to a pool before then, an utterance's
opening (its streams opened, their results relayed) is held until audio or an end asks for
more, and a switch drops it."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from types import TracebackType

from anyio.abc import ObjectSendStream

from gateway.funasr.results import Label, ResultFrames
from gateway.limits.budget import HeldAudio
from gateway.session.serving import ServedModel, Serving
from gateway.session.utterance import Utterance, UtteranceSettings
from gateway.session.utterance.actions import (
    Action,
    AskVad,
    CloseStream,
    FindSegments,
    FindSpeech,
    FinishStream,
    HoldAudio,
    OpenStream,
    Pool,
    RelayResults,
    ReleaseAudio,
    SendAudio,
    StreamRef,
)
from gateway.speakers.tracker import SpeakerTracker
from gateway.whole.long_audio import find_segments, speech_regions
from gateway.whole.speakers import speaker_regions
from gateway.whole.vad import vad_events
from shared.engines import Role
from shared.errors import ProtocolError
from workers.pool import AudioStream, WorkerPool


@dataclass(frozen=True, slots=True)
class Pass:
    """Opened pool streams, handed from the forwarder to the writer: a whole utterance
    (online; offline, in one stream or its segments'), or one 2pass sentence's streaming
    pass or its offline pass."""

    streams: tuple[AudioStream, ...]
    frames: ResultFrames
    last: bool  # the utterance's last pass: after its frames, the utterance is done


@dataclass(frozen=True, slots=True)
class Acknowledge:
    """An end with no utterance open that asked for its acknowledgement: sent in order,
    after the results of the utterances before it."""

    label: Label


class SessionStreams:
    """Carries out the utterances' actions against the pools; ``passes`` is the writer's
    bounded stream."""

    def __init__(
        self,
        serving: Serving,
        passes: ObjectSendStream[Pass | Acknowledge],
        model: ServedModel | None = None,
    ) -> None:
        self._serving = serving
        self._url_model = model  # the URL's ?model=, which no config may change
        self._model = model or serving.default
        self._place: ExitStack | None = None  # the model's places, once a config chose it
        self._tracker: SpeakerTracker | None = None  # its 2pass sentences' speakers
        self._heard = False  # audio has gone to the model's pools: it is settled
        self._pools = _pools_of(self._model)
        self._passes = passes
        # Audio held whole in this process (offline utterances, 2pass sentences), counted
        # against the gateway-wide ASR_MAX_BUFFERED_SECONDS.
        self._held = HeldAudio(serving.budget)
        self._open: set[AudioStream] = set()  # every open stream, closed at the end
        self._unheard: list[Action] = []  # an utterance's opening, held until audio
        self._bound: dict[StreamRef, AudioStream] = {}  # the forwarder's, until finished

    @property
    def model(self) -> ServedModel:
        return self._model

    def choose(self, name: str | None) -> bool:
        """A config's model (None: it names none); whether that switched the session to
        another. Raises ``UnknownModelError`` (1008), ``ProtocolError`` for a change the
        session cannot make, ``OverCapacityError`` (1013) when the model has no place free."""
        if self._url_model is not None and name not in (None, self._url_model.name):
            raise ProtocolError(
                f"the URL chose model {self._url_model.name!r}; a config cannot name another"
            )
        model = self._model if name is None else self._serving.model(name)
        if model is not self._model and self._heard:
            raise ProtocolError(
                f"the session is on model {self._model.name!r} since its first audio; open"
                f" another connection for {model.name!r}"
            )
        if model is self._model and (self._place is not None or self._url_model is not None):
            return False  # its place is taken already (the URL's: by the endpoint)
        place = model.take_places(self._serving.admission)
        switched = self._place is not None and model is not self._model
        if self._place is not None:
            self._place.close()
        self._model, self._place, self._pools = model, place, _pools_of(model)
        return switched

    def drop_unheard(self) -> None:
        """Forget the open utterance's opening, held since no audio came: the session
        switched model, and the utterance starts again on the new one."""
        assert not self._heard, "after audio the session's model is settled"
        self._unheard.clear()

    def heard(self) -> None:
        """Audio has come: the session's model is the one it has now."""
        self._heard = True

    @property
    def vad(self) -> bool:
        """Whether 2pass sentences end where the VAD pool says."""
        return Pool.VAD in self._pools

    def utterance_settings(self) -> UtteranceSettings:
        settings = self._serving.settings
        return UtteranceSettings(
            max_segment_bytes=settings.max_segment_bytes,
            endpoint=settings.endpoint,
            whole_text_is_delta=self._pools[Pool.WHOLE].text_is_delta,
            streaming_regions=self._pools[Pool.STREAMING].regions,
            speakers=Pool.SPEAKER in self._pools,
            speaker_tracker=self._speaker_tracker() if Pool.SPEAKER in self._pools else None,
            known_speakers=self._serving.known_speakers,
            hotword_rules=self._serving.hotword_rules,
        )

    def _speaker_tracker(self) -> SpeakerTracker:
        """The session's live speaker tracker, made at its first use."""
        if self._tracker is None:
            self._tracker = SpeakerTracker()
        return self._tracker

    async def carry_out(self, utterance: Utterance, actions: list[Action]) -> None:
        """Do what the utterance asks, in order, answering its questions, until it asks
        nothing more."""
        while actions:
            follow_up: list[Action] = []
            for action in actions:
                assert not follow_up, "a question is the last action"
                if not self._heard and isinstance(action, OpenStream | RelayResults):
                    self._unheard.append(action)
                    continue
                opening, self._unheard = self._unheard, []
                for held in opening:
                    await self._act(utterance, held)
                follow_up = await self._act(utterance, action)
            actions = follow_up

    async def _act(self, utterance: Utterance, action: Action) -> list[Action]:
        """One action; a question's answer is the utterance's next actions."""
        bound = self._bound
        match action:
            case OpenStream(stream=ref, options=options, urgency=urgency):
                stream = self._pools[ref.pool].open_stream(options, urgency)
                self._open.add(stream)
                bound[ref] = stream
            case RelayResults(streams=refs, frames=frames, last=last):
                await self._passes.send(Pass(tuple(bound[ref] for ref in refs), frames, last))
            case SendAudio(stream=ref, pcm=pcm):
                await bound[ref].send(pcm)
            case FinishStream(stream=ref, pcm=pcm):
                await bound.pop(ref).finish(pcm)  # its results are the writer's
            case CloseStream(stream=ref):
                stream = bound.pop(ref)
                await stream.aclose()
                self._open.discard(stream)
            case HoldAudio(size=size):
                self._held.take(size)  # within ASR_MAX_BUFFERED_SECONDS, else 1013
            case ReleaseAudio(size=size):
                self._held.give(size)
            case AskVad(stream=ref):
                answer = await bound[ref].receive()
                return utterance.vad_answered(vad_events(answer.decoded.segments))
            case FindSegments(pcm=pcm, speech=speech):
                settings = self._serving.settings
                segments = await find_segments(
                    pcm,
                    settings.max_segment_bytes,
                    self._model.companion(Role.VAD),
                    settings.endpoint.threshold,
                    speech,
                )
                return utterance.segments_found(segments)
            case FindSpeech(pcm=pcm):
                vad_pool = self._model.companion(Role.VAD)
                assert vad_pool is not None, "a speaker model needs a VAD model"
                speech = await speech_regions(vad_pool, pcm)
                speaker_regions(speech)  # TooManyRegionsError now, before any decode
                return utterance.speech_found(speech)
        return []

    def relayed(self, stream: AudioStream) -> None:
        """The writer has read the stream to its end and closed it."""
        self._open.discard(stream)

    async def aclose(self) -> None:
        """Close every stream still open and give back the audio held; safe to call twice."""
        for stream in list(self._open):
            await stream.aclose()  # never blocks: tells the worker to drop the stream
        self._open.clear()
        self._bound.clear()
        self._held.release_all()
        if self._place is not None:
            self._place.close()

    async def __aenter__(self) -> SessionStreams:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


# The utterances' pools that are a companion of the model's, by its role.
_COMPANION_POOLS = {Pool.VAD: Role.VAD, Pool.SPEAKER: Role.SPEAKER}


def _pools_of(model: ServedModel) -> dict[Pool, WorkerPool]:
    pools = {Pool.STREAMING: model.pool, Pool.WHOLE: model.whole_utterance_pool}
    for pool, role in _COMPANION_POOLS.items():
        companion = model.companion(role)
        if companion is not None:
            pools[pool] = companion
    return pools
