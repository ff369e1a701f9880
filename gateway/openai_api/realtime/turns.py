"""A realtime transcription session's input audio buffer and its turns: OpenAI's Realtime
events translated to FunASR's protocol (sans I/O; the way back is ``realtime_transcripts``).

Each turn (an OpenAI conversation item) is one FunASR utterance of the session behind
(``gateway.session.session``), named by its item id (``wav_name``): a config opens it, its audio
goes as binary frames of 16 kHz PCM, ``{"is_speaking": false}`` ends it. The first turn's
utterance opens at once, the next ones with their first audio.

Audio is decoded (PCM16, G.711 u-law or A-law) and resampled to 16 kHz here, one
resampler per turn as a FunASR utterance has one; a turn ends

- at ``input_audio_buffer.commit``: the resampler's tail goes with it;
- with ``server_vad``, where our energy endpointer (``gateway.audio.endpointer``) hears
  ``silence_duration_ms`` of pause after speech: the audio is cut exactly there, in 16 kHz
  bytes, and the resampler goes on into the next turn. A stretch that reaches the
  longest turn (``ASR_MAX_SEGMENT_SECONDS``) with no speech in it is dropped, as
  OpenAI commits nothing without speech; one with speech is committed there.
- at ``input_audio_buffer.clear``: its results are dropped, and so is what the resampler
  held.

Each turn's :class:`ItemState` is kept here until its completed transcript, which
``realtime_transcripts`` builds from the session's results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from gateway.audio.endpointer import EndpointSettings, EnergyEndpointer
from gateway.audio.g711 import PcmDecoder
from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.audio.resample import PcmResampler
from gateway.openai_api.realtime.config import (
    SPEAKERS_INCLUDE,
    Dialect,
    RealtimeEventError,
    RealtimeSettings,
)
from gateway.openai_api.realtime.server_events import (
    EventIds,
    cleared,
    committed,
    item_added,
    speech_started,
    speech_stopped,
)
from shared.messages import SAMPLE_RATE

END_FRAME = json.dumps({"is_speaking": False})
Event = dict[str, object]


@dataclass(frozen=True, slots=True)
class ToSession:
    """A FunASR frame for the session behind: text (a config, an end) or PCM."""

    text: str | None = None
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class ToClient:
    event: Event


Output = ToSession | ToClient


# -- turns --------------------------------------------------------------------------------


@dataclass(slots=True)
class ItemState:
    """A turn's item, from its utterance's config until its completed transcript."""

    bytes: int = 0  # 16 kHz bytes sent to its utterance
    dropped: bool = False  # cleared, or silence only: its results are not sent
    # Its streaming pass's text so far: its results' texts, or the last alone when the
    # engine's text is a running value (``text_is_delta`` false).
    texts: list[str] = field(default_factory=list)
    finals: list[str] = field(default_factory=list)  # its 2pass-offline texts
    # Asked for (``SPEAKERS_INCLUDE``): its sentences' live speakers, and the relabels of
    # the session's sentences that came with it.
    speakers: list[dict[str, object]] = field(default_factory=list)
    revisions: list[object] = field(default_factory=list)


@dataclass(slots=True)
class _Turn:
    item_id: str
    origin: int  # the session's 16 kHz bytes before it
    size: int = 0
    vad_base: int = 0  # bytes of the turn before the endpointer's sentence began
    speech_announced: bool = False
    opened: bool = False  # its utterance's config has gone to the session


class InputBuffer:
    """OpenAI's input audio buffer over a FunASR session: events in, outputs out.

    ``mode``: the FunASR mode of each turn's utterance (``2pass`` with an offline model,
    else ``online``); ``max_turn_bytes``: ASR_MAX_SEGMENT_SECONDS of 16 kHz PCM;
    ``max_frame_bytes``: the largest binary frame the session takes."""

    def __init__(
        self,
        settings: RealtimeSettings,
        ids: EventIds,
        *,
        mode: Literal["online", "2pass"],
        endpoint: EndpointSettings,
        max_turn_bytes: int,
        max_frame_bytes: int,
    ) -> None:
        self.settings = settings
        self.dialect: Dialect = "ga"
        self.items: dict[str, ItemState] = {}
        self._ids = ids
        self._mode = mode
        self._model: str | None = None  # the served model each turn's config names
        # The model has a speaker pool: a 2pass turn asked for its speakers gets them.
        self.speakers = False
        self._endpoint = endpoint
        self._max_turn_bytes = max_turn_bytes
        self._max_frame_bytes = max_frame_bytes
        self._decoder = PcmDecoder(settings.encoding)
        self._resampler = self._new_resampler()
        self._endpointer = self._new_endpointer()
        self._position = 0  # 16 kHz bytes of the session's audio so far
        self._previous_item: str | None = None
        self._turn = self._open_turn_state()

    # -- events --------------------------------------------------------------------------

    def start(self) -> list[Output]:
        """The first turn's utterance, at once: the session's ASR_CONFIG_TIMEOUT never runs
        out on a client that waits to speak (then ASR_FIRST_AUDIO_TIMEOUT applies); later
        turns open with their first audio (between them, ASR_IDLE_TIMEOUT)."""
        return self._open()

    def update(self, settings: RealtimeSettings, dialect: Dialect) -> list[Output]:
        """A new configuration from now: a new format or rate after the audio so far (which
        the old resampler finishes), turn detection from here on, hotwords for the decodes
        to come."""
        old, self.settings, self.dialect = self.settings, settings, dialect
        outputs: list[Output] = []
        if (settings.encoding, settings.rate) != (old.encoding, old.rate):
            if self._resampler is not None:
                outputs += self._take(self._resampler.flush())
            self._decoder = PcmDecoder(settings.encoding)
            self._resampler = self._new_resampler()
        if settings.turn_detection != old.turn_detection:
            self._endpointer = self._new_endpointer()
            self._turn.vad_base = self._turn.size  # it hears the turn from here
        if settings.hotwords != old.hotwords and self._turn.opened:
            outputs.append(ToSession(text=json.dumps({"hotwords": settings.hotwords})))
        return outputs

    @property
    def heard_nothing(self) -> bool:
        """No audio has reached the session yet: its model may still change."""
        return self._position == 0 and self._turn.size == 0

    def choose_model(self, name: str, mode: Literal["online", "2pass"]) -> list[Output]:
        """Name ``name`` in the turns' configs from now, as ``mode``'s utterances; the open
        turn, empty still (``heard_nothing``), ends unheard and opens again on it."""
        assert self.heard_nothing, "a session's model is settled by its first audio"
        self._model, self._mode = name, mode
        if not self._turn.opened:
            return []  # the next turn's config names it
        return [*self._drop_silent_turn(), *self._open()]

    def append(self, audio: bytes) -> list[Output]:
        pcm = self._decoder.decode(audio)
        if self._resampler is not None:
            pcm = self._resampler.push(pcm)
        return self._take(pcm)

    def commit(self, event_id: str | None) -> list[Output]:
        outputs: list[Output] = []
        if self._resampler is not None:
            outputs += self._take(self._resampler.flush())
            self._resampler = self._new_resampler()
        if self._turn.size == 0:
            raise RealtimeEventError(
                "input_audio_buffer_commit_empty",
                "the input audio buffer is empty: append audio before committing it",
                event_id=event_id,
            )
        self._endpointer = self._new_endpointer()
        return outputs + self._end_turn(stopped=False)

    def clear(self) -> list[Output]:
        """Drop the audio not yet committed: the turn's utterance ends unheard."""
        self._decoder = PcmDecoder(self.settings.encoding)
        self._resampler = self._new_resampler()
        self._endpointer = self._new_endpointer()
        outputs: list[Output] = []
        if self._turn.opened:
            self.items[self._turn.item_id].dropped = True
            self._position += self._turn.size
            outputs.append(ToSession(text=END_FRAME))
            self._turn = self._open_turn_state()
        outputs.append(ToClient(cleared()))
        return outputs

    # -- audio into turns ----------------------------------------------------------------

    def _take(self, pcm: bytes) -> list[Output]:
        """16 kHz PCM to the turn, cut where the endpointer hears a turn end."""
        if not pcm:
            return []
        if self._endpointer is None:
            return self._send(pcm)
        outputs: list[Output] = []
        start = 0
        for end in self._endpointer.push(pcm):
            take = self._turn.vad_base + end.offset - self._turn.size
            outputs += self._send(pcm[start : start + take])
            start += take
            if end.speech_start is None:  # silence to the longest turn: nothing to commit
                outputs += self._drop_silent_turn()
                continue
            outputs += self._announce_speech(end.speech_start)
            outputs += self._end_turn(stopped=True)
        outputs += self._send(pcm[start:])
        if self._endpointer.speech_start is not None:
            outputs += self._announce_speech(self._endpointer.speech_start)
        return outputs

    def _send(self, pcm: bytes) -> list[Output]:
        if not pcm:
            return []
        outputs = [] if self._turn.opened else self._open()
        self._turn.size += len(pcm)
        self.items[self._turn.item_id].bytes += len(pcm)
        step = self._max_frame_bytes // 2 * 2
        return outputs + [ToSession(data=pcm[at : at + step]) for at in range(0, len(pcm), step)]

    def _announce_speech(self, speech_start: int) -> list[Output]:
        turn = self._turn
        if turn.speech_announced:
            return []
        turn.speech_announced = True
        padding = self._padding_bytes()
        start = turn.origin + max(0, turn.vad_base + speech_start - padding)
        return [ToClient(speech_started(turn.item_id, _ms(start)))]

    def _end_turn(self, *, stopped: bool) -> list[Output]:
        """The turn's utterance ends: the buffer is committed as its item."""
        turn = self._turn
        outputs: list[Output] = [ToSession(text=END_FRAME)]
        if stopped:
            outputs.append(ToClient(speech_stopped(turn.item_id, _ms(turn.origin + turn.size))))
        outputs.append(ToClient(committed(turn.item_id, self._previous_item)))
        outputs.append(ToClient(item_added(turn.item_id, self._previous_item, self.dialect)))
        self._previous_item = turn.item_id
        self._position += turn.size
        self._turn = self._open_turn_state()
        return outputs

    def _drop_silent_turn(self) -> list[Output]:
        self.items[self._turn.item_id].dropped = True
        self._position += self._turn.size
        self._turn = self._open_turn_state()
        return [ToSession(text=END_FRAME)]

    # -- helpers -------------------------------------------------------------------------

    def _open_turn_state(self) -> _Turn:
        turn = _Turn(self._ids.item(), self._position)
        self.items[turn.item_id] = ItemState()
        return turn

    def _open(self) -> list[Output]:
        """The turn's utterance: its config."""
        self._turn.opened = True
        config: dict[str, object] = {
            "mode": self._mode,
            "wav_name": self._turn.item_id,
            "audio_fs": SAMPLE_RATE,  # resampled here
            "chunk_size": [5, 10, 5],  # FunASR's clients' 600 ms chunks
            "chunk_interval": 10,
            "hotwords": self.settings.hotwords,
            "is_speaking": True,
        }
        if self._model is not None:
            config["model"] = self._model
        if self.speakers and self._mode == "2pass" and SPEAKERS_INCLUDE in self.settings.include:
            config["spk"] = True
        return [ToSession(text=json.dumps(config, ensure_ascii=False))]

    def _new_resampler(self) -> PcmResampler | None:
        rate = self.settings.rate
        return None if rate == SAMPLE_RATE else PcmResampler(rate)

    def _new_endpointer(self) -> EnergyEndpointer | None:
        detection = self.settings.turn_detection
        if detection is None:
            return None
        endpoint = EndpointSettings(
            silence_ms=detection.silence_duration_ms,
            min_speech_ms=self._endpoint.min_speech_ms,
            energy_dbfs=detection.energy_dbfs(self._endpoint.energy_dbfs),
            preroll_ms=self._endpoint.preroll_ms,
        )
        return EnergyEndpointer(endpoint, self._max_turn_bytes)

    def _padding_bytes(self) -> int:
        detection = self.settings.turn_detection
        padding_ms = detection.prefix_padding_ms if detection is not None else 0
        return padding_ms * BYTES_PER_SECOND // 1000 // 2 * 2


def _ms(position: int) -> int:
    return position * 1000 // BYTES_PER_SECOND
