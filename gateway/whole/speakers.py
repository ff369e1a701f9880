"""Who spoke when in a file, and which speaker said each sentence.

funasr's ``generate(spk_model=...)`` is the reference: the speech regions its FSMN-VAD
finds are what CAM++ embeds (in 1.5 s windows), the clustered windows become speaker turns
(the speaker pool's worker does that: ``workers.engines.campplus.engine``), and each sentence
gets the speaker whose turns overlap it most (``distribute_spk``, here as
:func:`sentence_speakers`). funasr-server's own ``spk=true`` embeds each output segment
instead of the VAD's regions; we follow ``generate``, which its native diarization and
FunASR's docs use.

The VAD's one pass over a file gives both these regions and the cuts of its segments
(``gateway.audio.segment.Speech``): the caller asks for it once and hands it to both.

Cost: the VAD pass is about 3 % of the audio's duration in CPU; CAM++ about 30 ms per
window, 1.33 windows per second of speech; the clustering of an hour of speech (4,800
windows, UMAP and HDBSCAN) is measured in BENCHMARKS.md. The labelling is linear in the
sentences and turns: each sentence looks only at the turns that overlap it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import numpy as np
import numpy.typing as npt

from gateway.audio.segment import Speech
from gateway.funasr.speaker_labels import sentence_speakers
from shared.errors import GatewayError
from shared.messages import MAX_SPEECH_REGIONS, SentenceStamp, SpeakerTurn, StreamOptions
from workers.pool import WorkerPool

T = TypeVar("T")


class TooManyRegionsError(GatewayError):
    """The file has more speech regions than one speaker stream may carry."""


def speaker_regions(speech: Speech) -> tuple[tuple[int, int], ...]:
    """The speech regions in ms, as a speaker stream takes them; ``TooManyRegionsError``
    past what one stream may carry."""
    regions = speech.in_ms()
    if len(regions) > MAX_SPEECH_REGIONS:
        raise TooManyRegionsError(
            f"{len(regions)} speech regions; speaker labels take at most {MAX_SPEECH_REGIONS}"
        )
    return regions


async def speaker_turns(
    speaker_pool: WorkerPool, speech: Speech, samples: npt.NDArray[np.int16]
) -> tuple[SpeakerTurn, ...]:
    """The file's speaker turns: its VAD regions, embedded and clustered by the pool."""
    regions = speaker_regions(speech)
    turns: tuple[SpeakerTurn, ...] = ()
    async with speaker_pool.open_stream(StreamOptions(speech_regions=regions)) as stream:

        async def collect() -> None:
            nonlocal turns
            async for result in stream:
                turns = result.decoded.speakers or turns

        async with anyio.create_task_group() as group:
            group.start_soon(collect)
            await stream.finish(samples)
    return turns


async def with_speaker_turns(
    work: Callable[[], Awaitable[T]],
    speaker_pool: WorkerPool,
    speech: Speech,
    samples: npt.NDArray[np.int16],
) -> tuple[T, tuple[SpeakerTurn, ...]]:
    """``work``'s result (the file's decode), and the file's speaker turns, found at the
    same time: the speaker pool's workers are not the decoder's. The first to fail cancels
    the other, and its error is raised as it is (not in a group)."""
    done: list[T] = []
    turns: tuple[SpeakerTurn, ...] = ()
    failure: BaseException | None = None

    async def run(step: Callable[[], Awaitable[None]], scope: anyio.CancelScope) -> None:
        nonlocal failure
        try:
            await step()
        except Exception as exc:
            failure = failure or exc
            scope.cancel()

    async def decode() -> None:
        done.append(await work())

    async def label() -> None:
        nonlocal turns
        turns = await speaker_turns(speaker_pool, speech, samples)

    async with anyio.create_task_group() as group:
        group.start_soon(run, decode, group.cancel_scope)
        group.start_soon(run, label, group.cancel_scope)
    if failure is not None:
        raise failure
    return done[0], turns


def speakers_of(sentences: Sequence[SentenceStamp], turns: Sequence[SpeakerTurn]) -> list[int]:
    """Each sentence's speaker, from its first token's start to its last token's end."""
    return sentence_speakers([(s.start, s.end) for s in sentences], turns)
