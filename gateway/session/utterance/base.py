"""What every mode's utterance has in common: its config and label, per-utterance
resampling, and the answers to questions it does not ask."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.audio.endpointer import EndpointSettings
from gateway.audio.resample import PcmResampler
from gateway.audio.segment import Segment, Speech
from gateway.funasr.config import SessionConfig
from gateway.funasr.corrections import Corrections, Rule
from gateway.funasr.known_speakers import KnownSpeaker
from gateway.funasr.results import Label
from gateway.session.utterance.actions import Action
from gateway.speakers.tracker import SpeakerTracker
from gateway.whole.vad import VadEvent
from shared.messages import SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class UtteranceSettings:
    """What the modes need of the gateway's settings and pools."""

    max_segment_bytes: int  # ASR_MAX_SEGMENT_SECONDS of 16 kHz PCM
    endpoint: EndpointSettings
    # Of the pool decoding whole audio: each result's text is new text (else the final
    # result holds all of it).
    whole_text_is_delta: bool
    # Of the streaming pool: each stream is one speech region, decoded again as it grows,
    # in every mode (``EngineCapabilities.regions``; ``gateway.funasr.running_text``).
    streaming_regions: bool = False
    # The session's model has a speaker pool (ASR_SPEAKER_MODEL): offline ``spk`` is served.
    speakers: bool = False
    # With it, the session's live speaker tracker: a 2pass ``spk`` utterance's sentences'
    # ids, stable for the session (its utterances share it).
    speaker_tracker: SpeakerTracker | None = None
    # The server's text corrections (ASR_HOTWORD_RULES), beside each utterance's own.
    hotword_rules: tuple[Rule, ...] = ()
    # The server's known speakers (ASR_SPEAKERS), beside each offline utterance's clips.
    known_speakers: tuple[KnownSpeaker, ...] = ()


class Utterance(ABC):
    """One utterance, from its config to its last action (sans I/O).

    The session calls ``start`` at the config, ``audio`` with each frame's PCM at the
    client's ``audio_fs``, ``update`` when a frame changes the live fields, and ``end`` at
    the end of input; each returns the actions to carry out, in order. A mode implements
    ``_audio`` (16 kHz PCM) and ``_end``.
    """

    def __init__(self, config: SessionConfig, settings: UtteranceSettings) -> None:
        self.config = config
        self.settings = settings
        self.label = Label(
            config.mode, config.wav_name, corrections=self._corrections(config.hotwords)
        )
        self._resampler = PcmResampler(config.audio_fs) if config.audio_fs != SAMPLE_RATE else None

    def start(self) -> list[Action]:
        return []

    def audio(self, pcm: bytes) -> list[Action]:
        if self._resampler is not None:
            pcm = self._resampler.push(pcm)
        return self._audio(pcm)

    def update(self, config: SessionConfig) -> None:
        """From now on: the name on frames, the hotwords of the decodes to come."""
        if config.hotwords != self.config.hotwords:
            self.label.corrections = self._corrections(config.hotwords)
        self.config = config
        self.label.wav_name = config.wav_name

    def _corrections(self, hotwords: tuple[str, ...]) -> Corrections:
        return Corrections.of(hotwords, self.settings.hotword_rules)

    def end(self) -> list[Action]:
        actions = self._audio(self._resampler.flush()) if self._resampler is not None else []
        return actions + self._end()

    def vad_answered(self, events: Sequence[VadEvent]) -> list[Action]:
        raise AssertionError(f"{type(self).__name__} asks the VAD nothing")

    def segments_found(self, segments: Sequence[Segment]) -> list[Action]:
        raise AssertionError(f"{type(self).__name__} asks for no segments")

    def speech_found(self, speech: Speech) -> list[Action]:
        raise AssertionError(f"{type(self).__name__} asks where the speech is of nothing")

    @abstractmethod
    def _audio(self, pcm: bytes) -> list[Action]:
        """16 kHz PCM of the utterance, to its passes as its mode has them."""

    @abstractmethod
    def _end(self) -> list[Action]:
        """The end of input: finish the passes."""
