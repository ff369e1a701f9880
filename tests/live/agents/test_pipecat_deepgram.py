"""Pipecat's Deepgram STT (``DeepgramSTTService``, ``pipecat-ai`` 1.14.0, over Deepgram's SDK
7.17) against a real uvicorn's ``/v1/listen`` on the checksum engine, inside a pipeline as a
bot runs it: the user's audio frames (20 ms, as a transport delivers them) and the VAD's
``VADUserStartedSpeakingFrame`` / ``VADUserStoppedSpeakingFrame`` around each turn go in;
the ``TranscriptionFrame``s and ``InterimTranscriptionFrame``s that come out are read at the
pipeline's end, the ``ErrorFrame``s that go up at its start. ``base_url`` is the host,
``ws://127.0.0.1:PORT``: Pipecat makes the SDK's environment of it, and the SDK adds
``/v1/listen``.

Pipecat streams every frame it is given, and sends ``Finalize`` on each VAD stop; a final
``Results`` with ``from_finalize: true`` marks the next ``TranscriptionFrame``
``finalized`` (its STT-latency metric stops there). A turn's frames are queued at once and
the next turn only once the turn's transcripts have come (a user waits for the bot's
answer): Pipecat's VAD start clears a finalize still awaited, so a turn queued before the
last one's answer would steal its ``finalized``.

Two turns: the first, 0.4 s of a quiet room before the VAD's start, then speech with a
0.6 s pause inside it (a speaker thinking), which our endpointing (300 ms, Pipecat asks for
none) cuts; the second, a quiet room and speech. Three finals: the first turn's speech up
to the cut (``speech_final``), its rest up to the VAD stop (``from_finalize``), the second
turn (``from_finalize``). Each is exactly the checksum engine's text of its part of the
audio the pool got, and each interim that of a prefix of its utterance's.

The resampling chain: Pipecat's STT sends the frames as they are, at the pipeline's input
rate (its transport would resample to that rate before; there is no transport here), and
says that rate in the query. At 16 kHz the gateway does not resample: the pool gets the
frames' bytes. At 8 kHz (a telephone call) the gateway resamples with soxr, one run per
``Finalize`` (which flushes and restarts it; the pause's cut does not): each turn's 16 kHz
audio is one resampling of the turn (``tests.helpers.deepgram_agents.sixteen_k``). Exact.

Every message the SDK handed Pipecat is recorded: no ``Error`` among them (Pipecat reads
only ``Results``, so one would pass unseen). The server's side: no error counted, the
session ended without an error code or a traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from deepgram.listen.v1.types import ListenV1Results
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    StartFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.deepgram.stt import DeepgramSTTService
from pipecat.workers.runner import WorkerRunner

from bench.common.gateway import Gateway
from tests.helpers.agents import KEY, Samples, checksum_gateway, hush, silence, speech
from tests.helpers.checksums import checksum
from tests.helpers.deepgram_agents import (
    MIN_PAUSE_S,
    RATE,
    assert_ended_quietly,
    consecutive,
    listen_errors,
    pcm,
    samples_in,
    sixteen_k,
)
from tests.helpers.live_gateway import log_mark
from tests.helpers.timing import within

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TELEPHONE_RATE = 8_000
FRAME_S = 0.02  # a transport's audio frame
BEFORE_S = 0.4  # a quiet room before the VAD's start
FIRST_S, PAUSE_S = 0.8, 0.6  # the first turn's speech before its pause
RUN_TIMEOUT_S = 30.0
TURN_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with checksum_gateway(tmp_path_factory.mktemp("pipecat-deepgram")) as server:
        yield server


@dataclass(frozen=True, slots=True)
class Turn:
    """The user's audio for one turn: before the VAD's start, and up to its stop."""

    before: Samples
    spoken: Samples

    @property
    def samples(self) -> Samples:
        return np.concatenate([self.before, self.spoken])


def two_turns(rate: int) -> list[Turn]:
    rng = np.random.default_rng(rate)
    first = [speech(rng, FIRST_S, rate), silence(PAUSE_S, rate), speech(rng, 0.6, rate)]
    return [
        Turn(hush(rng, BEFORE_S, rate), np.concatenate([*first, hush(rng, 0.2, rate)])),
        Turn(
            hush(rng, BEFORE_S, rate),
            np.concatenate([speech(rng, 0.6, rate), hush(rng, 0.2, rate)]),
        ),
    ]


def turn_frames(turn: Turn, rate: int) -> list[Frame]:
    def audio(samples: Samples) -> list[Frame]:
        size = round(rate * FRAME_S)
        return [
            InputAudioRawFrame(audio=pcm(samples[at : at + size]), sample_rate=rate, num_channels=1)
            for at in range(0, len(samples), size)
        ]

    return [
        *audio(turn.before),
        VADUserStartedSpeakingFrame(),
        *audio(turn.spoken),
        VADUserStoppedSpeakingFrame(),
    ]


class Collector(FrameProcessor):
    """Keeps the frames going one way (not the ``StartFrame``), and passes every frame on."""

    def __init__(self, direction: FrameDirection) -> None:
        super().__init__()
        self.direction = direction
        self.frames: list[Frame] = []
        self.arrived = asyncio.Event()  # set at each frame kept

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == self.direction and not isinstance(frame, StartFrame):
            self.frames.append(frame)
            self.arrived.set()
        await self.push_frame(frame, direction)

    @property
    def finals(self) -> list[TranscriptionFrame]:
        return [frame for frame in self.frames if isinstance(frame, TranscriptionFrame)]


class RecordingDeepgramSTT(DeepgramSTTService):
    """Pipecat's Deepgram STT, keeping every message the SDK hands it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.messages: list[Any] = []

    async def _on_message(self, message: Any) -> None:
        self.messages.append(message)
        await super()._on_message(message)  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class Run:
    per_turn: list[list[TranscriptionFrame]]  # each turn's finals
    down: list[Frame]  # what reached the pipeline's end
    up: list[Frame]  # what came back up to its start
    messages: list[Any]  # what the SDK handed Pipecat


async def converse(
    server: Gateway, stt: RecordingDeepgramSTT, turns: list[Turn], finals: list[int], rate: int
) -> Run:
    """``turns`` through ``stt`` in a pipeline at ``rate``: each turn's frames queued once
    the one before has had its ``finals`` transcripts; then an ``EndFrame`` (Pipecat sends
    ``CloseStream`` and closes). Then the server's side: no ``Error`` counted, the session
    ended quietly."""
    mark, errors_before = log_mark(server), listen_errors(server)
    source, sink = Collector(FrameDirection.UPSTREAM), Collector(FrameDirection.DOWNSTREAM)
    worker = PipelineWorker(
        Pipeline([source, stt, sink]),
        cancel_on_idle_timeout=False,
        enable_rtvi=False,
        params=PipelineParams(audio_in_sample_rate=rate),
    )
    started = asyncio.Event()

    async def _started(_worker: PipelineWorker, _frame: Frame) -> None:
        started.set()

    worker.add_event_handler("on_pipeline_started", _started)

    per_turn: list[list[TranscriptionFrame]] = []

    async def drive() -> None:
        await started.wait()
        for turn, count in zip(turns, finals, strict=True):
            before = len(sink.finals)
            await worker.queue_frames(turn_frames(turn, rate))
            with within(TURN_TIMEOUT_S):
                while len(sink.finals) < before + count:
                    sink.arrived.clear()
                    await sink.arrived.wait()
            per_turn.append(sink.finals[before:])
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    with within(RUN_TIMEOUT_S):
        await asyncio.gather(runner.run(), drive())
    assert listen_errors(server) == errors_before
    await assert_ended_quietly(server, mark)
    return Run(per_turn, sink.frames, source.frames, stt.messages)


def check_the_run(run: Run, turns: list[Turn], rate: int) -> None:
    """No error either way; three exact finals, the first cut in the first turn's pause;
    each interim a prefix of its utterance's audio; ``finalized`` where a Finalize ended
    the utterance."""
    assert not any(isinstance(frame, ErrorFrame) for frame in run.up), run.up
    kinds = {type(message).__name__ for message in run.messages}
    assert kinds <= {
        "ListenV1Results",
        "ListenV1SpeechStarted",
        "ListenV1UtteranceEnd",
        "ListenV1Metadata",
    }, run.messages
    texts = [[frame.text for frame in finals] for finals in run.per_turn]
    audio = [sixteen_k(turn.samples, rate) for turn in turns]
    cut = samples_in(texts[0][0])
    in_pause = (
        round(RATE * (BEFORE_S + FIRST_S + MIN_PAUSE_S)),
        round(RATE * (BEFORE_S + FIRST_S + PAUSE_S)),
    )
    assert in_pause[0] <= cut <= in_pause[1], texts
    assert texts == [consecutive(texts[0], audio[0]), consecutive(texts[1], audio[1])]
    assert [2 * sum(samples_in(text) for text in turn) for turn in texts] == [len(a) for a in audio]
    assert [[frame.finalized for frame in finals] for finals in run.per_turn] == [
        [False, True],
        [True],
    ]
    results = [m for m in run.messages if isinstance(m, ListenV1Results) and m.is_final]
    assert [(m.speech_final, m.from_finalize) for m in results] == [
        (True, False),
        (False, True),
        (False, True),
    ]
    # Each interim: a prefix of its utterance's audio, in the order the frames came.
    utterances = [audio[0][: 2 * cut], audio[0][2 * cut :], audio[1]]
    index, interims = 0, 0
    for frame in run.down:
        if isinstance(frame, InterimTranscriptionFrame):
            size = 2 * samples_in(frame.text)
            assert frame.text == checksum(utterances[index][:size])
            interims += 1
        elif isinstance(frame, TranscriptionFrame):
            index += 1
    assert interims >= 3


async def test_pipecats_defaults_at_16khz(server: Gateway) -> None:
    """Pipecat's defaults: nova-3-general, en, interim_results, punctuate, smart_format
    false, numerals false, no endpointing (Deepgram's default), the pipeline's 16 kHz:
    nothing of it refused."""
    turns = two_turns(RATE)
    stt = RecordingDeepgramSTT(api_key=KEY, base_url=f"ws://127.0.0.1:{server.port}")
    run = await converse(server, stt, turns, [2, 1], RATE)
    check_the_run(run, turns, RATE)


async def test_a_telephone_call_at_8khz_with_a_users_settings(server: Gateway) -> None:
    """A pipeline at 8 kHz (a telephone call), with what users set: a profanity filter,
    smart formatting, key terms, Deepgram's endpointing and utterance end, a tag, no model
    improvement. Nothing refused; each turn resampled by the gateway as one run."""
    turns = two_turns(TELEPHONE_RATE)
    stt = RecordingDeepgramSTT(
        api_key=KEY,
        base_url=f"ws://127.0.0.1:{server.port}",
        tag="agents-test",
        mip_opt_out=True,
        settings=DeepgramSTTService.Settings(
            model="nova-3",
            profanity_filter=True,
            smart_format=True,
            keyterm=["Acme Cloud", "refund"],
            endpointing=300,
            utterance_end_ms=1000,
        ),
    )
    run = await converse(server, stt, turns, [2, 1], TELEPHONE_RATE)
    check_the_run(run, turns, TELEPHONE_RATE)
