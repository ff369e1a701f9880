"""Pipecat's OpenAI STT services (``pipecat-ai`` 1.14.0) against a real uvicorn on the
checksum engine, each inside a pipeline as a bot runs it: audio frames and the VAD's
``VADUserStartedSpeakingFrame`` / ``VADUserStoppedSpeakingFrame`` in, the
``TranscriptionFrame``s that come out read at the pipeline's end.

- ``OpenAISTTService`` (file mode, a ``SegmentedSTTService``): on each VAD stop it uploads
  a WAV of the turn: up to 1 s of the audio before the VAD's start (its buffer keeps no
  more while nobody speaks), the speech, and 0.5 s of silence it appends. The expected
  text is the gateway's one resampling of exactly that audio.
- ``OpenAIRealtimeSTTService``: every audio frame is appended, and each VAD stop commits
  (``turn_detection`` null by default). A turn is the audio since the last commit,
  resampled alone by the gateway.

The pipeline runs at 24 kHz, the Realtime API's rate, so Pipecat's own resampler (soxr,
which forgets its history after 0.2 s without audio, a wall-clock rule) passes the audio
through untouched and the expected text is exact; the gateway resamples 24 kHz to 16 kHz.
No test may see an error: Pipecat's realtime service raises on an ``error`` event and
reconnects, and either service's failure comes up the pipeline as an ``ErrorFrame``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import anyio
import numpy as np
import openai
import pytest
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.stt import OpenAIRealtimeSTTService, OpenAISTTService
from pipecat.tests.utils import QueuedFrameProcessor
from pipecat.transcriptions.language import Language
from pipecat.workers.runner import WorkerRunner

from bench.common.gateway import Gateway
from tests.helpers.agents import (
    KEY,
    REFUND_PROMPT,
    Samples,
    assert_no_traceback,
    checksum_gateway,
    frames_of,
    hush,
    pcm,
    realtime_errors,
    silence,
    speech,
    turn_text,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RATE = 24_000  # the pipeline's input rate: the Realtime API's, so Pipecat resamples nothing
FRAME_SAMPLES = RATE // 50  # 20 ms frames, as transports deliver them
PREROLL_S = 1.0  # what a SegmentedSTTService keeps before the VAD's start
TRAILING_S = 0.5  # the silence it appends to each segment
RUN_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with checksum_gateway(tmp_path_factory.mktemp("pipecat")) as server:
        yield server


@dataclass(frozen=True, slots=True)
class Turn:
    """What the user's side of a call holds for one turn: audio before the VAD's start
    (a quiet room, the VAD's lag), the speech up to the VAD's stop."""

    before: Samples
    spoken: Samples


@dataclass(frozen=True, slots=True)
class Run:
    down: list[Frame]  # what reached the pipeline's end
    up: list[Frame]  # what came back up to its start: errors

    @property
    def transcripts(self) -> list[str]:
        return [frame.text for frame in self.down if isinstance(frame, TranscriptionFrame)]


def call(rng: np.random.Generator, pause_in_first_turn: bool = False) -> list[Turn]:
    """Two turns; with ``pause_in_first_turn``, the first has 0.8 s of silence in it (a
    speaker thinking), longer than a 500 ms server VAD waits."""
    first = [speech(rng, 0.8, RATE)]
    if pause_in_first_turn:
        first += [silence(0.8, RATE), speech(rng, 0.6, RATE)]
    return [
        Turn(hush(rng, 1.4, RATE), np.concatenate([*first, hush(rng, 0.2, RATE)])),
        Turn(hush(rng, 0.4, RATE), np.concatenate([speech(rng, 0.6, RATE), hush(rng, 0.2, RATE)])),
    ]


def frames(turns: Sequence[Turn]) -> list[Frame]:
    out: list[Frame] = []
    for turn in turns:
        out += audio(turn.before)
        out.append(VADUserStartedSpeakingFrame())
        out += audio(turn.spoken)
        out.append(VADUserStoppedSpeakingFrame())
    return out


def audio(samples: Samples) -> list[Frame]:
    return [
        InputAudioRawFrame(audio=pcm(piece), sample_rate=RATE, num_channels=1)
        for piece in frames_of(samples, FRAME_SAMPLES)
    ]


async def run_pipeline(
    server: Gateway, stt: FrameProcessor, to_send: list[Frame], transcripts: int
) -> Run:
    """``stt`` between a source and a sink, as in ``pipecat.tests.utils.run_test``; the
    frames queued once the pipeline has started, an ``EndFrame`` once ``transcripts``
    transcriptions have reached the sink (the realtime service's come after its commits)."""
    up: asyncio.Queue[Frame] = asyncio.Queue()
    down: asyncio.Queue[Frame] = asyncio.Queue()
    source = QueuedFrameProcessor(queue=up, queue_direction=FrameDirection.UPSTREAM)
    sink = QueuedFrameProcessor(queue=down, queue_direction=FrameDirection.DOWNSTREAM)
    worker = PipelineWorker(
        Pipeline([source, stt, sink]),
        cancel_on_idle_timeout=False,
        enable_rtvi=False,
        params=PipelineParams(audio_in_sample_rate=RATE),
    )
    started = asyncio.Event()

    async def _started(_worker: PipelineWorker, _frame: Frame) -> None:
        started.set()

    worker.add_event_handler("on_pipeline_started", _started)
    received: list[Frame] = []

    async def drive() -> None:
        await started.wait()
        if isinstance(stt, OpenAIRealtimeSTTService):
            await session_configured(stt)
        await worker.queue_frames(to_send)
        while sum(isinstance(frame, TranscriptionFrame) for frame in received) < transcripts:
            frame = await down.get()
            received.append(frame)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    with anyio.fail_after(RUN_TIMEOUT_S):
        await asyncio.gather(runner.run(), drive())
    while not down.empty():
        received.append(down.get_nowait())
    errors = [up.get_nowait() for _ in range(up.qsize())]
    assert realtime_errors(server) == 0
    assert_no_traceback(server)
    return Run(received, errors)


async def session_configured(stt: OpenAIRealtimeSTTService) -> None:
    """Until the service has its ``session.updated``. Pipecat appends audio without waiting
    for it, which is harmless live: a call's first frames come in real time, and the update
    (sent on ``session.created``) is in long before a turn could end. This test sends
    seconds of audio at once, which would reach the server's default turn detection first."""
    while not stt._session_ready:  # noqa: ASYNC110 (Pipecat sets no event)
        await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("model", "include_prob_metrics"),
    [("gpt-transcribe", True), ("whisper-1", True), ("gpt-4o-transcribe", False)],
    ids=["gpt-transcribe-logprobs", "whisper-1-verbose", "gpt-4o-transcribe-json"],
)
async def test_segments_are_uploaded_with_a_free_text_prompt(
    server: Gateway, model: str, include_prob_metrics: bool
) -> None:
    """``include_prob_metrics``: ``response_format=json`` with ``include=["logprobs"]`` for
    GPT models, ``verbose_json`` for Whisper; a prompt of prose, a language, keywords."""
    turns = call(np.random.default_rng(3))
    # Pipecat's own option, so the test can close it: the service never closes the client
    # it builds (a bot's process keeps it), and the test's uvloop refuses to close on its
    # open keep-alive sockets.
    http = openai.DefaultAsyncHttpxClient()
    stt = OpenAISTTService(
        api_key=KEY,
        base_url=f"{server.http}/v1",
        http_client=http,
        include_prob_metrics=include_prob_metrics,
        settings=OpenAISTTService.Settings(
            model=model,
            language=Language.ZH,
            prompt=REFUND_PROMPT,
            temperature=0.0,
            keywords=["Acme Cloud", "退款"],
        ),
    )
    async with http:
        run = await run_pipeline(server, stt, frames(turns), transcripts=len(turns))
    assert not any(isinstance(frame, ErrorFrame) for frame in run.up), run.up
    trailing = silence(TRAILING_S, RATE)
    expected = [
        turn_text(
            np.concatenate([turn.before[-int(PREROLL_S * RATE) :], turn.spoken, trailing]), RATE
        )
        for turn in turns
    ]
    assert run.transcripts == expected


@pytest.mark.parametrize("model", ["gpt-transcribe", "gpt-live-transcribe"])
async def test_realtime_turns_end_at_the_vads_stops(server: Gateway, model: str) -> None:
    """Pipecat's default: ``turn_detection`` null, a commit on each VAD stop; a prompt of
    prose in the session's transcription. Deltas come as interim frames."""
    turns = call(np.random.default_rng(5))
    stt = OpenAIRealtimeSTTService(
        api_key=KEY,
        base_url=f"ws://127.0.0.1:{server.port}/v1/realtime",
        settings=OpenAIRealtimeSTTService.Settings(model=model, prompt=REFUND_PROMPT),
    )
    run = await run_pipeline(server, stt, frames(turns), transcripts=len(turns))
    assert not any(isinstance(frame, ErrorFrame) for frame in run.up), run.up
    assert run.transcripts == [
        turn_text(np.concatenate([turn.before, turn.spoken]), RATE) for turn in turns
    ]
    assert any(isinstance(frame, InterimTranscriptionFrame) for frame in run.down)


async def test_the_default_realtime_service_ends_turns_at_the_vads_stops_only(
    server: Gateway,
) -> None:
    """Pipecat's defaults: ``gpt-realtime-whisper`` (Pipecat drops a prompt for it),
    ``turn_detection`` null, language English. The first turn's 0.8 s pause, longer than
    a 500 ms server VAD waits, must not split it: one transcript per VAD stop. (Pipecat's
    ``turn_detection=None``, the field left out, means server VAD to Pipecat: it then
    commits nothing itself, so it is no way to run a realtime-only model.)"""
    turns = call(np.random.default_rng(9), pause_in_first_turn=True)
    stt = OpenAIRealtimeSTTService(
        api_key=KEY, base_url=f"ws://127.0.0.1:{server.port}/v1/realtime"
    )
    run = await run_pipeline(server, stt, frames(turns), transcripts=len(turns))
    assert not any(isinstance(frame, ErrorFrame) for frame in run.up), run.up
    assert run.transcripts == [
        turn_text(np.concatenate([turn.before, turn.spoken]), RATE) for turn in turns
    ]
