"""Long audio cut into segments of at most ``ASR_MAX_SEGMENT_SECONDS``, at pauses (sans I/O).

An offline model decodes an utterance in one ``generate``, with attention whose cost grows
with the square of its length: an hour in one piece takes minutes and gigabytes, and a
watchdog rightly takes it for hung. FunASR never does that either: its VAD cuts a file into
segments of at most ``max_single_segment_time`` (60 s), decoded as a batch and joined.

Where to cut comes from a per-frame silence mask (30 ms frames): FunASR's FSMN-VAD's speech
regions when a VAD pool is configured (``silence_from_speech``), else the frames' energy
(``silence_by_energy``, the endpointer's threshold). Within each stretch of
``max_bytes``, the cut goes in the middle of the longest silence of its second half, so
that no segment is shorter than half the limit unless the audio is; with no silent frame
there, at the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gateway.audio.endpointer import FRAME_BYTES, FRAME_SAMPLES
from shared.messages import SAMPLE_RATE

BYTES_PER_MS = SAMPLE_RATE // 1000 * 2
Mask = npt.NDArray[np.bool_]
ENERGY_BLOCK_FRAMES = 2000  # 60 s of frames per numpy pass


@dataclass(frozen=True, slots=True)
class Segment:
    """Bytes ``start`` to ``end`` of the utterance's 16 kHz int16 PCM."""

    start: int
    end: int

    @property
    def start_ms(self) -> int:
        return self.start // BYTES_PER_MS


def silence_by_energy(pcm: bytes | bytearray | memoryview, threshold: float) -> Mask:
    """One entry per whole 30 ms frame: True where the frame's RMS is at most ``threshold``
    (int16 units)."""
    frames = len(pcm) // FRAME_BYTES
    samples = np.frombuffer(pcm, dtype="<i2", count=frames * FRAME_BYTES // 2)
    mask: Mask = np.empty(frames, dtype=np.bool_)
    # In blocks: an hour in float32 at once would be another 230 MB beside its PCM.
    for first in range(0, frames, ENERGY_BLOCK_FRAMES):
        block = samples[first * FRAME_SAMPLES : (first + ENERGY_BLOCK_FRAMES) * FRAME_SAMPLES]
        rows = block.reshape(-1, FRAME_SAMPLES).astype(np.float32)
        mask[first : first + len(rows)] = np.sqrt(np.mean(rows**2, axis=1)) <= threshold
    return mask


def silence_from_speech(speech: Sequence[tuple[int, int]], total_bytes: int) -> Mask:
    """The mask of frames outside every speech region (bytes ``(start, end)``)."""
    mask: Mask = np.ones(total_bytes // FRAME_BYTES, dtype=np.bool_)
    for start, end in speech:
        mask[start // FRAME_BYTES : -(-end // FRAME_BYTES)] = False
    return mask


@dataclass(frozen=True, slots=True)
class Speech:
    """Where the VAD heard speech in an utterance of ``total_bytes``: ``regions`` as
    ``(start, end)`` in bytes of its PCM. One VAD pass gives both the segments' cuts
    (``silence``) and the regions a speaker stream embeds (``in_ms``)."""

    regions: tuple[tuple[int, int], ...]
    total_bytes: int

    def silence(self) -> Mask:
        return silence_from_speech(self.regions, self.total_bytes)

    def in_ms(self) -> tuple[tuple[int, int], ...]:
        """The regions in ms, those shorter than a millisecond left out."""
        return tuple(
            (start // BYTES_PER_MS, end // BYTES_PER_MS)
            for start, end in self.regions
            if end // BYTES_PER_MS > start // BYTES_PER_MS
        )


def cut(total_bytes: int, max_bytes: int, silent: Mask | None = None) -> list[Segment]:
    """Segments covering ``total_bytes`` in order, each at most ``max_bytes`` long."""
    if max_bytes < FRAME_BYTES:
        raise ValueError("segments must be at least one 30 ms frame long")
    segments: list[Segment] = []
    position = 0
    while total_bytes - position > max_bytes:
        limit = position + max_bytes // FRAME_BYTES * FRAME_BYTES
        at = _pause(silent, position + max_bytes // 2, limit) if silent is not None else None
        end = limit if at is None else at
        segments.append(Segment(position, end))
        position = end
    segments.append(Segment(position, total_bytes))
    return segments


def _pause(silent: Mask, earliest: int, latest: int) -> int | None:
    """The middle of the longest run of silent frames between two byte offsets, at a frame
    boundary; None if none of those frames is silent."""
    first = -(-earliest // FRAME_BYTES)
    last = min(latest // FRAME_BYTES, len(silent))
    window = silent[first:last].astype(np.int8)
    if not window.any():
        return None
    # Runs of True: where the padded difference rises and where it falls.
    edges = np.diff(np.concatenate(([0], window, [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    longest = int(np.argmax(ends - starts))
    middle = (int(starts[longest]) + int(ends[longest])) // 2
    return (first + middle) * FRAME_BYTES


def join_texts(texts: Sequence[str]) -> str:
    """Segments' texts as one, joined with a space as FunASR's ``generate`` joins its VAD
    segments' (empty ones left out)."""
    return " ".join(text for text in texts if text)
