"""An online utterance's frames joined into the chunks it decodes, before the forwarder
(sans I/O).

FunASR's clients send each 600 ms model chunk as 10 frames of 60 ms. An ``online`` utterance
does nothing with audio until a chunk is whole (``gateway.audio.chunker``), yet every frame
handed to the forwarder costs a hand-off between the session's tasks and a pass through the
utterance's logic (gathered, the event loop spends 10-21 % less per frame: BENCHMARKS.md,
issue #30). So the reader holds an online
utterance's frames and hands them on as one piece once they reach the end of a chunk,
counted from the utterance's start as the utterance cuts; anything else the client sends
(an update, an end) first hands on what is held. The utterance gets the same bytes in the
same order, and each chunk as soon as it is whole: nothing waits that it could use.

Other modes get each frame as it comes: a 2pass utterance asks the VAD about whatever audio
has come whenever the last answer is in, and an offline one counts its audio against
ASR_MAX_BUFFERED_SECONDS as it comes. Audio at another rate than 16 kHz is resampled in
the utterance, whose chunks then do not line up with the client's bytes.

A piece never exceeds ``max_piece_bytes`` (ASR_MAX_FRAME_BYTES): the events read ahead stay
bounded by frames of that size, as without gathering, and what is held is less than one.
"""

from __future__ import annotations

from gateway.funasr.config import SessionConfig
from gateway.funasr.parser import AudioReceived, ConfigReceived, EndOfUtterance, Event
from shared.messages import SAMPLE_RATE


def chunk_cut(config: SessionConfig) -> int | None:
    """Bytes of the client's audio an utterance of ``config`` acts on at a time, from its
    start (audio in between is only held); None: it may act on any audio."""
    if config.mode != "online" or config.audio_fs != SAMPLE_RATE:
        return None
    return config.chunk_bytes


class FrameGatherer:
    """``gather`` turns each frame's parsed events into the events to hand on; ``flush``
    hands on what is held (the connection is gone, or the session parks)."""

    def __init__(self, max_piece_bytes: int) -> None:
        self._max_piece_bytes = max_piece_bytes
        self._cut: int | None = None  # the open utterance's, if it is gathered
        self._to_cut = 0  # bytes until the open utterance's next chunk is whole
        self._held = bytearray()

    @property
    def held_bytes(self) -> int:
        return len(self._held)

    def gather(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for event in events:
            if isinstance(event, AudioReceived) and self._cut is not None:
                out += self._push(event.pcm, self._cut)
                continue
            out += self.flush()
            if isinstance(event, ConfigReceived):
                self._cut = chunk_cut(event.config)
                self._to_cut = self._cut or 0
            elif isinstance(event, EndOfUtterance):
                self._cut = None
            out.append(event)
        return out

    def flush(self) -> list[Event]:
        if not self._held:
            return []
        piece = bytes(self._held)
        self._held.clear()
        return [AudioReceived(piece)]

    def _push(self, pcm: bytes, cut: int) -> list[Event]:
        out = self.flush() if len(self._held) + len(pcm) > self._max_piece_bytes else []
        self._held += pcm
        if len(pcm) < self._to_cut:
            self._to_cut -= len(pcm)
            return out
        self._to_cut = cut - (len(pcm) - self._to_cut) % cut
        return out + self.flush()
