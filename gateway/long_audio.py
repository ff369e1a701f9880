"""Long audio, cut where ``gateway.segment`` says and decoded as a batch of segments.

The cut points come from the VAD pool when one is configured (FunASR's FSMN-VAD speech
regions, as FunASR's own ``generate`` segments a file), else from the audio's energy; the
segments are then decoded concurrently (the offline worker's held step gathers them into
batches) and joined, their timestamps moved to where each segment starts.
"""

from __future__ import annotations

import anyio
import numpy as np
import numpy.typing as npt

from gateway.segment import Segment, cut, join_texts, silence_by_energy, silence_from_speech
from gateway.vad import SpeechEnded, SpeechStarted, vad_events
from shared.messages import StreamOptions
from workers.pool import Transcript, WorkerPool

Pcm = bytes | bytearray | memoryview


async def speech_regions(vad_pool: WorkerPool, pcm: Pcm) -> list[tuple[int, int]]:
    """Where FunASR's FSMN-VAD hears speech in ``pcm``: ``(start, end)`` in bytes."""
    regions: list[tuple[int, int]] = []
    start: int | None = None
    async with vad_pool.open_stream() as stream:

        async def read() -> None:
            nonlocal start
            async for result in stream:
                for event in vad_events(result.segments):
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
    return regions


async def find_segments(
    pcm: Pcm, max_bytes: int, vad_pool: WorkerPool | None, energy_threshold: float
) -> list[Segment]:
    """``pcm`` as segments of at most ``max_bytes``: one when it is short enough."""
    if len(pcm) <= max_bytes:
        return [Segment(0, len(pcm))]
    if vad_pool is not None:
        silent = silence_from_speech(await speech_regions(vad_pool, pcm), len(pcm))
    else:
        silent = await anyio.to_thread.run_sync(silence_by_energy, pcm, energy_threshold)
    return cut(len(pcm), max_bytes, silent)


async def transcribe_segments(
    pool: WorkerPool,
    samples: npt.NDArray[np.int16],
    segments: list[Segment],
    options: StreamOptions,
) -> Transcript:
    """Decode every segment at once and join them into one transcript."""
    parts: list[Transcript | None] = [None] * len(segments)

    async def decode(index: int, segment: Segment) -> None:
        piece = samples[segment.start // 2 : segment.end // 2]
        parts[index] = await pool.transcribe_with_times(piece, options)

    async with anyio.create_task_group() as group:
        for index, segment in enumerate(segments):
            group.start_soon(decode, index, segment)
    texts: list[str] = []
    timestamps: list[tuple[int, int]] = []
    for segment, part in zip(segments, parts, strict=True):
        assert part is not None, "every decode either filled its part or raised"
        texts.append(part.text)
        offset = segment.start_ms
        timestamps += [(start + offset, end + offset) for start, end in part.timestamps]
    return Transcript(join_texts(texts), tuple(timestamps))


async def transcribe_long(
    pool: WorkerPool,
    samples: npt.NDArray[np.int16],
    options: StreamOptions,
    *,
    max_segment_bytes: int,
    vad_pool: WorkerPool | None,
    energy_threshold: float,
) -> Transcript:
    """A whole file's transcript, decoded in segments when it is longer than the limit."""
    pcm = np.ascontiguousarray(samples, dtype="<i2").data.cast("B")  # no copy
    segments = await find_segments(pcm, max_segment_bytes, vad_pool, energy_threshold)
    if len(segments) == 1:
        return await pool.transcribe_with_times(samples, options)
    return await transcribe_segments(pool, samples, segments, options)
