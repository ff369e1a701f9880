"""Long audio, cut where ``gateway.audio.segment`` says and decoded as a batch of segments.

The cut points come from the VAD pool when one is configured (FunASR's FSMN-VAD speech
regions, as FunASR's own ``generate`` segments a file), else from the audio's energy; the
segments are then decoded concurrently (the offline worker's held step gathers them into
batches), their token times and sentences moved to where each segment starts, and either
joined (``transcribe_long``: ``/v1/transcribe``) or read one by one in order as they finish
(``decode_segments``: OpenAI's segments, cues and streamed deltas).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

import anyio
import numpy as np
import numpy.typing as npt

from gateway.audio.segment import (
    BYTES_PER_MS,
    Segment,
    Speech,
    cut,
    join_texts,
    silence_by_energy,
)
from gateway.whole.vad import SpeechEnded, SpeechStarted, vad_events
from shared.errors import GatewayError
from shared.messages import Decoded, SentenceStamp, StreamOptions
from workers.pool import WorkerPool

Pcm = bytes | bytearray | memoryview


async def speech_regions(vad_pool: WorkerPool, pcm: Pcm) -> Speech:
    """Where FunASR's FSMN-VAD hears speech in ``pcm``: one pass of the VAD pool, whose
    regions both cut the segments and feed the speakers."""
    regions: list[tuple[int, int]] = []
    start: int | None = None
    async with vad_pool.open_stream() as stream:

        async def read() -> None:
            nonlocal start
            async for result in stream:
                for event in vad_events(result.decoded.segments):
                    match event:
                        case SpeechStarted(at_byte=at):
                            start = at
                        case SpeechEnded(at_byte=at):
                            regions.append((0 if start is None else start, at))
                            start = None

        async with anyio.create_task_group() as group:
            group.start_soon(read)
            await stream.finish(pcm)
    if start is not None:  # speech to the very end
        regions.append((start, len(pcm)))
    return Speech(tuple(regions), len(pcm))


async def find_segments(
    pcm: Pcm,
    max_bytes: int,
    vad_pool: WorkerPool | None,
    energy_threshold: float,
    speech: Speech | None = None,
) -> list[Segment]:
    """``pcm`` as segments of at most ``max_bytes``: one when it is short enough. Cut at
    the pauses of ``speech`` where the VAD was asked already, else of a VAD pass of its
    own, else of the audio's energy."""
    if len(pcm) <= max_bytes:
        return [Segment(0, len(pcm))]
    if speech is None and vad_pool is not None:
        speech = await speech_regions(vad_pool, pcm)
    if speech is not None:
        silent = speech.silence()
    else:
        silent = await anyio.to_thread.run_sync(silence_by_energy, pcm, energy_threshold)
    return cut(len(pcm), max_bytes, silent)


def moved(sentence: SentenceStamp, offset_ms: int) -> SentenceStamp:
    """``sentence`` ``offset_ms`` later: from its segment's start to the file's."""
    return SentenceStamp(
        sentence.text_seg,
        sentence.punc,
        sentence.start + offset_ms,
        sentence.end + offset_ms,
        tuple((start + offset_ms, end + offset_ms) for start, end in sentence.ts_list),
    )


@dataclass(frozen=True, slots=True)
class DecodedSegment:
    """One segment's transcript, its token times and sentences moved to where the segment
    starts in the file; ``start_ms``/``end_ms``: the segment's bounds in the file."""

    index: int
    start_ms: int
    end_ms: int
    transcript: Decoded


class SegmentDecodes:
    """The segments of one file being decoded at once; iterated, each as soon as it and
    every one before it is done (in order, whatever order the batches finish in)."""

    def __init__(self, segments: Sequence[Segment]) -> None:
        self.segments = tuple(segments)
        self._done = [anyio.Event() for _ in segments]
        self._results: list[Decoded | GatewayError | None] = [None] * len(segments)

    async def decode(
        self, pool: WorkerPool, samples: npt.NDArray[np.int16], options: StreamOptions, index: int
    ) -> None:
        segment = self.segments[index]
        try:
            piece = samples[segment.start // 2 : segment.end // 2]
            self._results[index] = await pool.decode(piece, options)
        except GatewayError as error:
            # Kept for the reader to raise in its turn: one task's failure must not cancel
            # the segments before it, nor reach the caller wrapped in an ExceptionGroup.
            self._results[index] = error
        finally:
            self._done[index].set()

    async def __aiter__(self) -> AsyncIterator[DecodedSegment]:
        for index, segment in enumerate(self.segments):
            await self._done[index].wait()
            result = self._results[index]
            if isinstance(result, GatewayError):
                raise result
            assert result is not None, "a decode either filled its result or kept its error"
            offset = segment.start_ms
            times = tuple((start + offset, end + offset) for start, end in result.timestamps)
            sentences = tuple(moved(sentence, offset) for sentence in result.sentences)
            transcript = replace(result, timestamps=times, sentences=sentences)
            yield DecodedSegment(index, offset, segment.end // BYTES_PER_MS, transcript)


@asynccontextmanager
async def decode_segments(
    pool: WorkerPool,
    samples: npt.NDArray[np.int16],
    segments: Sequence[Segment],
    options: StreamOptions,
) -> AsyncIterator[SegmentDecodes]:
    """Decode every segment at once (the offline worker's held step batches them); what
    is still decoding when the ``with`` is left is cancelled."""
    decodes = SegmentDecodes(segments)
    async with anyio.create_task_group() as group:
        for index in range(len(segments)):
            group.start_soon(decodes.decode, pool, samples, options, index)
        yield decodes
        group.cancel_scope.cancel()


def join_segments(pieces: Sequence[DecodedSegment]) -> Decoded:
    """Segments' transcripts as one: texts joined as FunASR joins them, times and sentences
    in order, the tags of the first segment that has them (a file's language is the one
    heard first)."""
    texts = [piece.transcript.text for piece in pieces]
    timestamps = tuple(pair for piece in pieces for pair in piece.transcript.timestamps)
    sentences = tuple(sentence for piece in pieces for sentence in piece.transcript.sentences)
    tags = next((p.transcript.tags for p in pieces if p.transcript.tags is not None), None)
    return Decoded(join_texts(texts), timestamps, sentences=sentences, tags=tags)


async def transcribe_segments(
    pool: WorkerPool,
    samples: npt.NDArray[np.int16],
    segments: Sequence[Segment],
    options: StreamOptions,
) -> list[DecodedSegment]:
    """Every segment's transcript, in order."""
    async with decode_segments(pool, samples, segments, options) as decodes:
        return [piece async for piece in decodes]


async def file_segments(
    samples: npt.NDArray[np.int16],
    *,
    max_segment_bytes: int,
    vad_pool: WorkerPool | None,
    energy_threshold: float,
    speech: Speech | None = None,
) -> list[Segment]:
    """Where a whole file is cut: one segment unless it is longer than the limit (at the
    pauses of ``speech`` where the VAD was asked already)."""
    return await find_segments(
        pcm_of(samples), max_segment_bytes, vad_pool, energy_threshold, speech
    )


def pcm_of(samples: npt.NDArray[np.int16]) -> memoryview:
    """The samples' bytes, as the pools and the VAD take them; no copy."""
    return np.ascontiguousarray(samples, dtype="<i2").data.cast("B")


async def transcribe_long(
    pool: WorkerPool,
    samples: npt.NDArray[np.int16],
    options: StreamOptions,
    *,
    max_segment_bytes: int,
    vad_pool: WorkerPool | None,
    energy_threshold: float,
    speech: Speech | None = None,
) -> Decoded:
    """A whole file's transcript, decoded in segments when it is longer than the limit."""
    segments = await file_segments(
        samples,
        max_segment_bytes=max_segment_bytes,
        vad_pool=vad_pool,
        energy_threshold=energy_threshold,
        speech=speech,
    )
    return join_segments(await transcribe_segments(pool, samples, segments, options))
