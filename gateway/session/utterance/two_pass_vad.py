"""``2pass`` with the FSMN-VAD pool: sentences end where FunASR's VAD says (sans I/O).

The audio goes to a VAD stream and to the streaming pass piece by piece, whatever the
client's framing; after each piece the session waits for the VAD's answer (the ``AskVad``
question) before the next. A piece goes once it is whole (``piece_bytes``: at most
``VAD_PIECE_BYTES``, a whole fraction of a model chunk, so that each chunk is complete at
the end of a piece and waits for nothing), or at the end. (Sent as each frame came,
FunASR's 60 ms frames were each a VAD step and a round trip of their own.) A sentence ends
after the piece in which the VAD saw its end (``gateway.whole.vad``), or once it reaches
ASR_MAX_SEGMENT_SECONDS without one, as FunASR's VAD ends one at
``max_single_segment_time``; the next then starts mid-speech.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.funasr.config import SessionConfig
from gateway.session.utterance.actions import (
    Action,
    AskVad,
    CloseStream,
    OpenStream,
    Pool,
    SendAudio,
    StreamRef,
)
from gateway.session.utterance.base import UtteranceSettings
from gateway.session.utterance.two_pass import TwoPass
from gateway.whole.vad import VAD_PIECE_BYTES, SpeechEnded, SpeechStarted, VadEvent


def piece_bytes(chunk_bytes: int) -> int:
    """The largest whole fraction of a chunk within ``VAD_PIECE_BYTES``, in whole samples."""
    pieces = -(-chunk_bytes // VAD_PIECE_BYTES)
    return max(2, chunk_bytes // pieces // 2 * 2)


class TwoPassVad(TwoPass):
    def __init__(
        self, config: SessionConfig, settings: UtteranceSettings, *, offline_pass: bool = True
    ) -> None:
        super().__init__(config, settings, offline_pass=offline_pass)
        self._piece_bytes = piece_bytes(config.chunk_bytes)
        self._vad = StreamRef(Pool.VAD)
        self._unsent = bytearray()  # audio not yet sent to the VAD, oldest first
        self._asking = False  # a piece's answer is awaited
        self._ending = False  # the end of input came
        self._speech_start: int | None = None  # the VAD's, in bytes from the utterance's start

    def start(self) -> list[Action]:
        return [*super().start(), OpenStream(self._vad, self.config.stream_options())]

    def _audio(self, pcm: bytes) -> list[Action]:
        self._unsent += pcm
        return [] if self._asking else self._next_piece()

    def _end(self) -> list[Action]:
        self._ending = True
        return [] if self._asking else self._next_piece()

    def vad_answered(self, events: Sequence[VadEvent]) -> list[Action]:
        assert self._asking, "an answer comes after a piece"
        self._asking = False
        actions: list[Action] = []
        for event in events:
            match event:
                case SpeechStarted(at_byte=at):
                    self._speech_start = at
                case SpeechEnded() if self.sentence_length:
                    actions += self._end_sentence(last=False, speech_start=self._sentence_speech())
                    self._speech_start = None
        if self.sentence_length >= self.settings.max_segment_bytes:
            # No pause the VAD took for an end: cut at the limit, as FunASR's VAD does at
            # max_single_segment_time. The next sentence starts mid-speech.
            actions += self._end_sentence(last=False, speech_start=self._sentence_speech())
            self._speech_start = None
        return actions + self._next_piece()

    def _next_piece(self) -> list[Action]:
        """The next piece to the VAD and the streaming pass, then the question; or, with no
        audio left after the end, the last sentence's end."""
        room = self.settings.max_segment_bytes - self.sentence_length  # > 0: see above
        size = min(self._piece_bytes, room)
        if len(self._unsent) >= size or (self._ending and self._unsent):
            piece = bytes(self._unsent[:size])
            del self._unsent[:size]
            self._asking = True
            # The VAD first: it works while the streaming pass gets the piece.
            return [SendAudio(self._vad, piece), *self._take(piece), AskVad(self._vad)]
        if self._ending:
            self._ending = False
            speech_start = self._sentence_speech()
            return [  # the VAD's last answers are of no use now
                CloseStream(self._vad),
                *self._end_sentence(last=True, speech_start=speech_start),
            ]
        return []

    def _sentence_speech(self) -> int | None:
        """The VAD's speech start of this sentence, counted from the sentence's start."""
        if self._speech_start is None:
            return None
        return max(0, self._speech_start - self.sentence_origin)
