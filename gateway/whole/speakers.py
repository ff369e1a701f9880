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

The speaker stream's final result also carries each speaker label's voiceprint; a reference
clip (a known speaker's 2-10 s, ``gateway.funasr.known_speakers``) is embedded the same way,
as a stream of its own whose one region covers it: under 20 windows funasr's clustering
gives every window label 0, so label 0's voiceprint is the clip's, the mean of its windows'
embeddings.

Cost: the VAD pass is about 3 % of the audio's duration in CPU; CAM++ about 30 ms per
window, 1.33 windows per second of speech; the clustering of an hour of speech (4,800
windows, UMAP and HDBSCAN) is measured in BENCHMARKS.md. The labelling is linear in the
sentences and turns: each sentence looks only at the turns that overlap it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio
import numpy as np
import numpy.typing as npt

from gateway.audio.segment import Speech
from gateway.funasr.speaker_labels import sentence_speakers
from shared.errors import GatewayError
from shared.messages import (
    MAX_SPEECH_REGIONS,
    SAMPLE_RATE,
    Decoded,
    SentenceStamp,
    SpeakerTurn,
    StreamOptions,
)
from workers.pool import WorkerPool

T = TypeVar("T")
Voiceprint = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Speakers:
    """What the speaker pool found: the file's turns, each speaker label's voiceprint, and
    each reference clip's (``()`` for a clip that gave none)."""

    turns: tuple[SpeakerTurn, ...] = ()
    voiceprints: tuple[Voiceprint, ...] = ()
    references: tuple[Voiceprint, ...] = ()


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


async def diarize(
    speaker_pool: WorkerPool, speech: Speech, samples: npt.NDArray[np.int16]
) -> Decoded:
    """The file's speaker turns and voiceprints: its VAD regions, embedded and clustered by
    the pool (the final result's; earlier ones say nothing)."""
    regions = speaker_regions(speech)
    return await speaker_pool.decode(samples, StreamOptions(speech_regions=regions))


def reference_options(samples: int) -> StreamOptions:
    """A reference clip's speaker stream, ``samples`` long: the clip as one region (a
    FunASR session's clips go to such streams too, ``gateway.session.utterance.offline``)."""
    return StreamOptions(speech_regions=((0, samples * 1000 // SAMPLE_RATE),))


async def reference_voiceprint(
    speaker_pool: WorkerPool, samples: npt.NDArray[np.int16]
) -> Voiceprint:
    """A reference clip's voiceprint (``()`` if it gave none): the clip as one region."""
    if len(samples) * 1000 // SAMPLE_RATE <= 0:
        return ()
    options = reference_options(len(samples))
    voiceprints = (await speaker_pool.decode(samples, options)).voiceprints
    return voiceprints[0] if voiceprints else ()


async def with_speaker_turns(
    work: Callable[[], Awaitable[T]],
    speaker_pool: WorkerPool,
    speech: Speech,
    samples: npt.NDArray[np.int16],
) -> tuple[T, tuple[SpeakerTurn, ...]]:
    """``work``'s result (the file's decode), and the file's speaker turns, found at the
    same time (``with_speakers``)."""
    done, speakers = await with_speakers(work, speaker_pool, speech, samples)
    return done, speakers.turns


async def with_speakers(
    work: Callable[[], Awaitable[T]],
    speaker_pool: WorkerPool,
    speech: Speech,
    samples: npt.NDArray[np.int16],
    references: Sequence[npt.NDArray[np.int16]] = (),
) -> tuple[T, Speakers]:
    """``work``'s result (the file's decode), and the file's speakers with the
    ``references``' voiceprints, found at the same time: the speaker pool's workers are not
    the decoder's, and each clip is a stream of its own. The first to fail cancels the
    others, and its error is raised as it is (not in a group)."""
    done: list[T] = []
    found = Decoded()
    prints: list[Voiceprint] = [() for _ in references]
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
        nonlocal found
        found = await diarize(speaker_pool, speech, samples)

    def embed(index: int) -> Callable[[], Awaitable[None]]:
        async def step() -> None:
            prints[index] = await reference_voiceprint(speaker_pool, references[index])

        return step

    async with anyio.create_task_group() as group:
        group.start_soon(run, decode, group.cancel_scope)
        group.start_soon(run, label, group.cancel_scope)
        for index in range(len(references)):
            group.start_soon(run, embed(index), group.cancel_scope)
    if failure is not None:
        raise failure
    return done[0], Speakers(found.speakers, found.voiceprints, tuple(prints))


def speakers_of(sentences: Sequence[SentenceStamp], turns: Sequence[SpeakerTurn]) -> list[int]:
    """Each sentence's speaker, from its first token's start to its last token's end."""
    return sentence_speakers([(s.start, s.end) for s in sentences], turns)
