"""What an utterance asks the session to do: the actions its logic returns (sans I/O).

An utterance names its pool streams by :class:`StreamRef`; the session opens a real pool
stream for each and does the rest. Three actions are questions (:class:`AskVad`,
:class:`FindSegments`, :class:`FindSpeech`): the session answers each before it feeds the
utterance anything else, and a question is always the last action of a list.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gateway.audio.segment import Speech
from gateway.funasr.results import ResultFrames
from shared.messages import StreamOptions
from workers.pool import Urgency

Pcm = bytes | bytearray | memoryview


class Pool(enum.Enum):
    """Which pool serves a stream."""

    STREAMING = "streaming"  # the streaming model's
    WHOLE = "whole"  # the offline model's when ASR_OFFLINE_MODEL is set, else the streaming one's
    VAD = "vad"  # ASR_VAD_MODEL's FSMN-VAD
    SPEAKER = "speaker"  # ASR_SPEAKER_MODEL's CAM++


@dataclass(slots=True, eq=False)  # told apart by identity
class StreamRef:
    """A pool stream of the utterance, before and after the session opens it."""

    pool: Pool


@dataclass(frozen=True, slots=True)
class OpenStream:
    """``urgency``: whether someone waits for the stream's result now (a 2pass utterance's
    last sentence), which a niced offline pool serves at nice 0 (``workers.pool.Urgency``)."""

    stream: StreamRef
    options: StreamOptions
    urgency: Urgency = Urgency.BACKGROUND


@dataclass(frozen=True, slots=True)
class RelayResults:
    """Hand opened streams to the writer, which sends their results as ``frames`` makes
    them, one stream after the other. ``last``: the utterance's last pass, after whose
    frames the utterance is done."""

    streams: tuple[StreamRef, ...]
    frames: ResultFrames
    last: bool


@dataclass(frozen=True, slots=True)
class SendAudio:
    stream: StreamRef
    pcm: Pcm


@dataclass(frozen=True, slots=True)
class FinishStream:
    """The stream's last audio: its final result follows; the utterance sends it no more."""

    stream: StreamRef
    pcm: Pcm = b""


@dataclass(frozen=True, slots=True)
class CloseStream:
    """Drop a stream whose results are of no more use."""

    stream: StreamRef


@dataclass(frozen=True, slots=True)
class HoldAudio:
    """``size`` more bytes held whole in the gateway: taken from ASR_MAX_BUFFERED_SECONDS
    (``OverCapacityError``, 1013, when it is spent)."""

    size: int


@dataclass(frozen=True, slots=True)
class ReleaseAudio:
    size: int


@dataclass(frozen=True, slots=True)
class AskVad:
    """Question: wait for the VAD stream's answer to the piece just sent; answered with
    ``TwoPassVad.vad_answered``."""

    stream: StreamRef


@dataclass(frozen=True, slots=True)
class FindSegments:
    """Question: where to cut ``pcm`` (longer than ASR_MAX_SEGMENT_SECONDS) into segments,
    at pauses (``gateway.whole.long_audio.find_segments``): those of ``speech`` where the
    VAD was asked already; answered with ``Offline.segments_found``."""

    pcm: Pcm
    speech: Speech | None = None


@dataclass(frozen=True, slots=True)
class FindSpeech:
    """Question: where the VAD pool hears speech in ``pcm`` (the regions a speaker stream
    embeds, and the pauses segments are cut at); answered with ``Offline.speech_found``."""

    pcm: Pcm


Action = (
    OpenStream
    | RelayResults
    | SendAudio
    | FinishStream
    | CloseStream
    | HoldAudio
    | ReleaseAudio
    | AskVad
    | FindSegments
    | FindSpeech
)
