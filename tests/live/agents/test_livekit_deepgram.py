"""LiveKit Agents' Deepgram STT (``livekit.plugins.deepgram.STT``, 1.8.9) against a real uvicorn's
``/v1/listen`` on the checksum engine, driven as an agent drives it: ``stt.stream()``, a
room's audio frames pushed as they come (10 ms frames, in real time), ``flush()`` at the end
of the user's turn (LiveKit sends what it holds, then ``Finalize``), ``end_input()`` (a
second ``Finalize``, then ``CloseStream``), and the ``SpeechEvent``s read to the stream's
end. LiveKit's defaults throughout: nova-3, en-US, interim_results, punctuate,
endpointing_ms=25 (ours is 300 ms at least), vad_events, filler_words, no_delay, 16 kHz,
a ``KeepAlive`` at once and every 5 s.

The audio: 1 s of speech, 0.6 s of silence, 0.8 s of speech. Two utterances: the pause
ends the first (``speech_final``: END_OF_SPEECH), the flush's ``Finalize`` the second
(``from_finalize``). Each FINAL_TRANSCRIPT is exactly the checksum engine's text of its
part of the audio the pool got, and each INTERIM_TRANSCRIPT that of a prefix of it. LiveKit
takes ``SpeechData.text`` from ``alt["transcript"]`` and its words from ``words[]``; a
checksum is one word, so nothing of it is split.

The resampling chain, per test (``tests.helpers.deepgram_agents.sixteen_k``):

- 16 kHz frames, LiveKit's default ``sample_rate``: LiveKit builds no resampler and sends
  the frames' bytes (in its own 50 ms messages); the gateway does not resample 16 kHz. The
  pool gets the bytes pushed: exact.
- 48 kHz frames (a room's rate) with ``sample_rate=48000``: LiveKit sends them as they are
  and says 48000 in the query; the gateway resamples the stream with soxr as one run (the
  pause's cut does not restart it, the final ``Finalize`` flushes it). The pool gets one
  soxr resampling of the whole, cut in two: exact.
- 48 kHz frames with the default ``sample_rate``: LiveKit's own ``rtc.AudioResampler``
  makes 16 kHz of them, and it dithers at random (two fed the same frames, or one in two
  processes, differ by a bit or two in about half the samples), so no text can be
  computed: the utterances must cover its output, 2.4 s of 16 kHz, cut in the pause.

What reached the client is recorded as it arrived (LiveKit's ``http_session`` argument: an
aiohttp session of the test's own, whose WebSocket responses keep every message): no
``Error``, ``Metadata`` last, then the server's close 1000. The server's side: no error
counted, the session ended without an error code or a traceback. The stream ends on
LiveKit's next ``KeepAlive`` tick after the close (5 s after it connected), as it does
against Deepgram.

``end_input()`` after ``flush()`` sends a second ``Finalize`` with nothing left to decode:
its empty ``from_finalize`` answer must come after the first one's final, in the stream's
order, as Deepgram's does (the last test); LiveKit drops empty transcripts, so the tests
above do not depend on where it comes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import aiohttp
import anyio
import numpy as np
import pytest
from livekit import rtc
from livekit.agents import stt
from livekit.plugins import deepgram

from bench.common.gateway import Gateway
from tests.helpers.agents import KEY, Samples, checksum_gateway, silence, speech
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

ROOM_RATE = 48_000  # what a LiveKit room's tracks carry
FRAME_S = 0.01  # a LiveKit audio frame
FIRST_S, PAUSE_S, SECOND_S = 1.0, 0.6, 0.8
STREAM_TIMEOUT_S = 20.0
Kind = stt.SpeechEventType


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with checksum_gateway(tmp_path_factory.mktemp("livekit-deepgram")) as server:
        yield server


def speech_pause_speech(rate: int) -> Samples:
    rng = np.random.default_rng(rate)
    return np.concatenate(
        [speech(rng, FIRST_S, rate), silence(PAUSE_S, rate), speech(rng, SECOND_S, rate)]
    )


@dataclass(slots=True)
class Run:
    events: list[stt.SpeechEvent] = field(default_factory=list)  # RECOGNITION_USAGE left out
    received: list[aiohttp.WSMessage] = field(default_factory=list)  # as the WebSocket got it
    errors: list[stt.STTError] = field(default_factory=list)  # the STT's "error" events
    closed: anyio.Event = field(default_factory=anyio.Event)  # the WebSocket's close came

    @property
    def kinds(self) -> list[Kind]:
        """The events' types, each run of interims as one."""
        return [kind for kind, _ in groupby(event.type for event in self.events)]

    def texts(self, kind: Kind) -> list[str]:
        return [e.alternatives[0].text for e in self.events if e.type == kind]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(m.data) for m in self.received if m.type == aiohttp.WSMsgType.TEXT]


@asynccontextmanager
async def recorded_stream(
    server: Gateway, run: Run, **options: Any
) -> AsyncIterator[deepgram.SpeechStream]:
    """A LiveKit Deepgram STT stream built as users build it, by ``base_url``, with
    ``options`` (LiveKit's defaults otherwise), on an aiohttp session of the test's own
    that keeps what the WebSocket receives in ``run``; closed after, as an agent closes it."""

    class Recording(aiohttp.ClientWebSocketResponse):
        async def receive(self, timeout: float | None = None) -> aiohttp.WSMessage:
            message = await super().receive(timeout)
            run.received.append(message)
            if message.type == aiohttp.WSMsgType.CLOSE:
                run.closed.set()
            return message

    async with aiohttp.ClientSession(ws_response_class=Recording) as http:
        dg = deepgram.STT(
            base_url=f"http://127.0.0.1:{server.port}/v1/listen",
            api_key=KEY,
            http_session=http,
            **options,
        )
        dg.on("error", run.errors.append)
        stream = dg.stream()
        try:
            yield stream
        finally:
            await stream.aclose()
            await dg.aclose()


async def transcribe(server: Gateway, samples: Samples, rate: int, **options: Any) -> Run:
    """``samples`` at ``rate`` through a LiveKit Deepgram STT stream: pushed in real time,
    flushed, ended, read to its end. Then the server's side: no ``Error`` counted, the
    session ended quietly."""
    mark, errors_before = log_mark(server), listen_errors(server)
    run = Run()
    size = round(rate * FRAME_S)
    async with recorded_stream(server, run, **options) as stream:

        async def read() -> None:
            async for event in stream:
                if event.type != Kind.RECOGNITION_USAGE:
                    run.events.append(event)

        with within(STREAM_TIMEOUT_S):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(read)
                start = anyio.current_time()
                for index, at in enumerate(range(0, len(samples), size)):
                    await anyio.sleep_until(start + index * FRAME_S)
                    piece = samples[at : at + size]
                    stream.push_frame(rtc.AudioFrame(pcm(piece), rate, 1, len(piece)))
                stream.flush()
                stream.end_input()
    assert listen_errors(server) == errors_before
    await assert_ended_quietly(server, mark)
    return run


def check_the_exchange(run: Run) -> None:
    """What every run must show, whatever its audio: LiveKit saw no error; the client got
    no ``Error``, ``Metadata`` last, then the server's close 1000; the events of two
    utterances, the first ended by its pause, the second by the flush."""
    assert run.errors == []
    messages = run.messages
    assert [m for m in messages if m["type"] not in ("Results", "SpeechStarted")] == [
        messages[-1]
    ], messages
    assert messages[-1]["type"] == "Metadata"
    assert messages[-1]["duration"] == pytest.approx(FIRST_S + PAUSE_S + SECOND_S)
    last = run.received[-1]
    assert (last.type, last.data) == (aiohttp.WSMsgType.CLOSE, 1000), run.received
    finals = [m for m in messages if m["type"] == "Results" and m["is_final"]]
    spoken = [m for m in finals if m["channel"]["alternatives"][0]["transcript"]]
    assert [(m["speech_final"], m["from_finalize"]) for m in spoken] == [
        (True, False),
        (False, True),
    ]
    # vad_events: where each utterance's speech starts, seconds into the stream (to a
    # frame of the endpointer's).
    starts = [m["timestamp"] for m in messages if m["type"] == "SpeechStarted"]
    assert starts == pytest.approx([0.0, FIRST_S + PAUSE_S], abs=0.03)
    assert run.kinds == [
        Kind.START_OF_SPEECH,
        Kind.INTERIM_TRANSCRIPT,
        Kind.FINAL_TRANSCRIPT,
        Kind.END_OF_SPEECH,
        Kind.START_OF_SPEECH,
        Kind.INTERIM_TRANSCRIPT,
        Kind.FINAL_TRANSCRIPT,
    ]


def check_the_cut(first: str) -> int:
    """The first utterance ends in the pause, at least ``MIN_PAUSE_S`` into it (LiveKit asks
    for 25 ms): its sample count, checked."""
    cut = samples_in(first)
    assert round(RATE * (FIRST_S + MIN_PAUSE_S)) <= cut <= round(RATE * (FIRST_S + PAUSE_S)), first
    return cut


@pytest.mark.parametrize(
    ("rate", "options"),
    [(RATE, {}), (ROOM_RATE, {"sample_rate": ROOM_RATE})],
    ids=["16khz-frames", "48khz-frames-sent-as-they-are"],
)
async def test_a_turn_with_a_pause_is_two_exact_finals(
    server: Gateway, rate: int, options: dict[str, Any]
) -> None:
    """Exact finals and interims, the finals' times from their words."""
    samples = speech_pause_speech(rate)
    run = await transcribe(server, samples, rate, **options)
    check_the_exchange(run)
    audio = sixteen_k(samples, rate)
    finals = run.texts(Kind.FINAL_TRANSCRIPT)
    cut = check_the_cut(finals[0])
    assert finals == consecutive(finals, audio)
    assert 2 * sum(samples_in(text) for text in finals) == len(audio)
    # Each interim: a prefix of its utterance's audio (the first's come before its final).
    origin = 0
    for event in run.events:
        text = event.alternatives[0].text if event.alternatives else ""
        if event.type == Kind.INTERIM_TRANSCRIPT:
            assert text == checksum(audio[origin : origin + 2 * samples_in(text)])
        elif event.type == Kind.FINAL_TRANSCRIPT:
            origin = 2 * cut
    # LiveKit's times for a final come from its words: the utterance's span.
    spans = [
        e.alternatives[0].end_time - e.alternatives[0].start_time
        for e in run.events
        if e.type == Kind.FINAL_TRANSCRIPT
    ]
    assert spans == pytest.approx([samples_in(text) / RATE for text in finals], abs=1e-3)


async def test_48khz_frames_through_livekits_own_resampler(server: Gateway) -> None:
    """LiveKit's default 16 kHz from a 48 kHz room: its ``rtc.AudioResampler`` dithers, so
    the transcripts' lengths are checked: two utterances, cut in the pause, that cover the
    resampler's output (2.4 s of 16 kHz) with nothing lost or counted twice."""
    samples = speech_pause_speech(ROOM_RATE)
    run = await transcribe(server, samples, ROOM_RATE)
    check_the_exchange(run)
    finals = run.texts(Kind.FINAL_TRANSCRIPT)
    check_the_cut(finals[0])
    assert sum(samples_in(text) for text in finals) == len(samples) * RATE // ROOM_RATE


async def test_a_second_finalize_is_answered_after_the_first(server: Gateway) -> None:
    """LiveKit's ``flush()`` then ``end_input()``: two ``Finalize`` in a row, the second
    with nothing left to decode. Deepgram answers in the stream's order: the first one's
    final (the transcript, ``from_finalize``), then the second's empty one. (Pipecat reads
    an empty ``from_finalize`` as "the transcript came before it",
    ``DeepgramSTTService._on_message``, and stops its latency metric there.)"""
    samples = speech(np.random.default_rng(2), 1.0, RATE)
    run = Run()
    async with recorded_stream(server, run) as stream:
        for at in range(0, len(samples), round(RATE * FRAME_S)):
            piece = samples[at : at + round(RATE * FRAME_S)]
            stream.push_frame(rtc.AudioFrame(pcm(piece), RATE, 1, len(piece)))
        stream.flush()
        stream.end_input()
        with within(STREAM_TIMEOUT_S):
            await run.closed.wait()
    answers = [
        m["channel"]["alternatives"][0]["transcript"]
        for m in run.messages
        if m["type"] == "Results" and m.get("from_finalize")
    ]
    assert answers == [checksum(pcm(samples)), ""]
