"""``2pass`` with the energy endpointer: sentences end where ``gateway.audio.endpointer`` hears a
pause, or at ASR_MAX_SEGMENT_SECONDS without one (sans I/O). The audio is cut exactly at
each end: the bytes before it are the sentence's, the rest the next one's."""

from __future__ import annotations

from gateway.audio.endpointer import EnergyEndpointer
from gateway.funasr.config import SessionConfig
from gateway.session.utterance.actions import Action
from gateway.session.utterance.base import UtteranceSettings
from gateway.session.utterance.two_pass import TwoPass


class TwoPassEnergy(TwoPass):
    def __init__(
        self, config: SessionConfig, settings: UtteranceSettings, *, offline_pass: bool = True
    ) -> None:
        super().__init__(config, settings, offline_pass=offline_pass)
        self._endpointer = EnergyEndpointer(settings.endpoint, settings.max_segment_bytes)

    def _audio(self, pcm: bytes) -> list[Action]:
        actions: list[Action] = []
        start = 0
        for end in self._endpointer.push(pcm):
            # ``end`` counts from the sentence's start; ``sentence_length``: its earlier bytes.
            take = end.offset - self.sentence_length
            actions += self._take(pcm[start : start + take])
            start += take
            actions += self._end_sentence(last=False, speech_start=end.speech_start)
        actions += self._take(pcm[start:])
        return actions

    def _end(self) -> list[Action]:
        return self._end_sentence(last=True, speech_start=self._endpointer.speech_start)
