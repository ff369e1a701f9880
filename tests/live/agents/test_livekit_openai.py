"""LiveKit Agents' OpenAI STT (``livekit.plugins.openai.STT``, 1.8.9) against a real uvicorn
on the checksum engine, driven as an agent drives it: ``recognize(buffer)`` for file mode
(what ``AgentSession`` calls through its ``StreamAdapter`` once per VAD turn) and
``stream()`` for realtime mode, frames pushed and ``SpeechEvent``s read.

Every transcript is checked exactly (``tests.helpers.agents``), through LiveKit's own
audio path:

- file mode: the frames are combined into a WAV at their own rate (48 kHz here, a room's
  rate), which the gateway resamples to 16 kHz: the expected text is that one resampling;
- realtime: LiveKit appends 24 kHz; frames pushed at 24 kHz go as they are (its resampler
  is not built), the gateway resamples the session's audio to 16 kHz as one stream, and a
  server VAD's turns are consecutive slices of it. LiveKit's own ``rtc.AudioResampler``
  (what 48 kHz frames go through) dithers: two of them fed the same frames differ by a
  unit or two here and there, so through it only the turns' lengths are checked;
- realtime with a realtime-only model: frames are pushed at 24 kHz in LiveKit's own 50 ms
  pieces, so nothing is held back and each commit closes exactly the frames before it;
  each committed turn is resampled alone.

No test may see an ``error`` event: LiveKit raises a non-retryable ``APIError`` on one and
the stream is dead for good.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np
import pytest
from livekit import rtc
from livekit.agents import stt, utils, vad
from livekit.plugins import openai as livekit_openai

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
    split_turns,
    turn_text,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EVENT_TIMEOUT_S = 20.0
ROOM_RATE = 48_000  # what a LiveKit room's tracks carry
FRAME_MS = 10  # a LiveKit audio frame
REALTIME_RATE = 24_000  # LiveKit's realtime STT sends this
APPEND_SAMPLES = REALTIME_RATE // 20  # its 50 ms appends


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with checksum_gateway(tmp_path_factory.mktemp("livekit")) as server:
        yield server


@pytest.fixture
async def http_context(server: Gateway) -> AsyncIterator[None]:
    """LiveKit's plugins take their aiohttp session from a job's context; a script opens
    one. After each test: no error event was sent, no traceback was logged."""
    async with utils.http_context.open():
        yield
    assert realtime_errors(server) == 0
    assert_no_traceback(server)


def audio_frames(samples: Samples, rate: int, frame_ms: int) -> list[rtc.AudioFrame]:
    size = rate * frame_ms // 1000
    return [rtc.AudioFrame(pcm(piece), rate, 1, len(piece)) for piece in frames_of(samples, size)]


@asynccontextmanager
async def openai_stt(server: Gateway, **options: Any) -> AsyncIterator[livekit_openai.STT]:
    """The STT as users build it, by ``base_url``, closed after: its websocket pool, and
    the OpenAI client it built (an agent's process keeps it for its life; the test's
    event loop, uvloop, refuses to close on its open keep-alive sockets)."""
    openai = livekit_openai.STT(base_url=f"{server.http}/v1", api_key=KEY, **options)
    try:
        yield openai
    finally:
        await openai.aclose()
        await openai._client.close()


@pytest.mark.parametrize(
    "options",
    [
        # LiveKit's defaults (gpt-4o-mini-transcribe, language "en"), with a free-text prompt.
        {"prompt": REFUND_PROMPT},
        # What LiveKit sends gpt-transcribe: a language list, keywords, a temperature.
        {
            "model": "gpt-transcribe",
            "language": ["en", "zh"],
            "keywords": ["Acme Cloud", "退款"],
            "temperature": 0.2,
        },
        # whisper-1: verbose_json, its language read back.
        {"model": "whisper-1", "prompt": REFUND_PROMPT},
    ],
    ids=["default-prompt", "gpt-transcribe-keywords", "whisper-1-verbose"],
)
async def test_recognize_a_48khz_buffer(
    server: Gateway, http_context: None, options: dict[str, Any]
) -> None:
    rng = np.random.default_rng(48)
    samples = np.concatenate([hush(rng, 0.3, ROOM_RATE), speech(rng, 1.2, ROOM_RATE)])
    async with openai_stt(server, **options) as openai:
        with anyio.fail_after(EVENT_TIMEOUT_S):
            event = await openai.recognize(audio_frames(samples, ROOM_RATE, FRAME_MS))
    assert event.type == stt.SpeechEventType.FINAL_TRANSCRIPT
    assert event.alternatives[0].text == turn_text(samples, ROOM_RATE)


@pytest.mark.parametrize("rate", [REALTIME_RATE, ROOM_RATE], ids=["24khz", "48khz"])
async def test_a_realtime_stream_with_server_vad_and_a_prompt(
    server: Gateway, http_context: None, rate: int
) -> None:
    """``use_realtime=True`` on a file model: LiveKit's default server VAD (threshold 0.5,
    prefix 600 ms, silence 350 ms), a free-text prompt; two utterances, two finals, cut
    350 ms into each pause. At 24 kHz LiveKit appends the frames as they are, and the
    turns must be the session's audio cut in two, nothing lost or doubled. At 48 kHz
    LiveKit's own resampler dithers (two of them fed the same frames differ by a unit or
    two here and there), so no exact text can be computed: the cut is checked."""
    rng = np.random.default_rng(7)
    samples = np.concatenate(
        [speech(rng, 1.0, rate), silence(0.8, rate), speech(rng, 0.9, rate), silence(0.8, rate)]
    )
    options = {"model": "gpt-4o-transcribe", "use_realtime": True, "prompt": REFUND_PROMPT}
    async with openai_stt(server, **options) as openai, openai.stream() as stream:
        for frame in audio_frames(samples, rate, FRAME_MS):
            stream.push_frame(frame)
        events = await read_until(stream, stt.SpeechEventType.FINAL_TRANSCRIPT, count=2)
    finals = texts(events)
    if rate == REALTIME_RATE:
        assert finals == split_turns(finals, samples, rate)
    first = int(finals[0].split(":")[0]) / 16_000
    assert 1.0 + 0.35 <= first <= 1.0 + 0.35 + 0.1
    kinds = [event.type for event in events]
    assert kinds.count(stt.SpeechEventType.START_OF_SPEECH) == 2


async def test_a_realtime_only_model_gets_one_final_per_client_commit(
    server: Gateway, http_context: None
) -> None:
    """``gpt-realtime-whisper``: LiveKit sends no turn_detection (and ``?model=`` on the
    URL) and commits on its own VAD's end of speech. Its VAD waits longer than our 500 ms
    server VAD would: the first turn has a 0.8 s pause inside it, which must not split it."""
    rng = np.random.default_rng(11)
    rate = REALTIME_RATE
    turns = [
        np.concatenate(
            [
                speech(rng, 0.9, rate),
                silence(0.8, rate),
                speech(rng, 0.6, rate),
                hush(rng, 0.3, rate),
            ]
        ),
        np.concatenate([speech(rng, 0.6, rate), hush(rng, 0.3, rate)]),
    ]
    client_vad = ScriptedVAD([len(turn) for turn in turns])
    options = {"model": "gpt-realtime-whisper", "vad": client_vad, "prompt": REFUND_PROMPT}
    events: list[stt.SpeechEvent] = []
    async with openai_stt(server, **options) as openai, openai.stream() as stream:
        for turn in turns:
            # Pushed whole; LiveKit commits when its VAD has seen the turn's last frame,
            # and says END_OF_SPEECH as it does.
            for frame in audio_frames(turn, rate, 50):
                stream.push_frame(frame)
            events += await read_until(stream, stt.SpeechEventType.END_OF_SPEECH)
        finals = texts(events)
        events += await read_until(
            stream, stt.SpeechEventType.FINAL_TRANSCRIPT, count=len(turns) - len(finals)
        )
    assert texts(events) == [turn_text(turn, rate) for turn in turns]


# -- helpers --------------------------------------------------------------------------------


async def read_until(
    stream: stt.SpeechStream, kind: stt.SpeechEventType, count: int = 1
) -> list[stt.SpeechEvent]:
    """The stream's events up to the ``count``-th of ``kind`` (none: nothing is read)."""
    events: list[stt.SpeechEvent] = []
    seen = 0
    with anyio.fail_after(EVENT_TIMEOUT_S):
        while seen < count:
            event = await stream.__anext__()
            events.append(event)
            seen += event.type == kind
    return events


def texts(events: list[stt.SpeechEvent]) -> list[str]:
    return [
        event.alternatives[0].text
        for event in events
        if event.type == stt.SpeechEventType.FINAL_TRANSCRIPT
    ]


class ScriptedVAD(vad.VAD):
    """A client VAD that hears what the test says was spoken: each turn's end of speech
    when the stream has pushed it the turn's last sample (as Silero would, after the
    turn's trailing pause). LiveKit commits the buffer on it."""

    def __init__(self, turn_samples: list[int]) -> None:
        super().__init__(capabilities=vad.VADCapabilities(update_interval=0.05))
        self._ends = list(np.cumsum(turn_samples))

    def stream(self) -> vad.VADStream:
        return _ScriptedStream(self, self._ends)


class _ScriptedStream(vad.VADStream):
    def __init__(self, owner: ScriptedVAD, ends: list[int]) -> None:
        self._ends = ends
        super().__init__(owner)

    async def _main_task(self) -> None:
        heard = 0
        starts = [0, *self._ends[:-1]]
        async for item in self._input_ch:
            if not isinstance(item, rtc.AudioFrame):
                continue
            before, heard = heard, heard + item.samples_per_channel
            for start, end in zip(starts, self._ends, strict=True):
                if before <= start < heard:
                    self._send(vad.VADEventType.START_OF_SPEECH, heard)
                if before < end <= heard:
                    self._send(vad.VADEventType.END_OF_SPEECH, heard)

    def _send(self, kind: vad.VADEventType, at: int) -> None:
        event = vad.VADEvent(
            type=kind,
            samples_index=at,
            timestamp=time.time(),
            speech_duration=0.0,
            silence_duration=0.0,
        )
        self._event_ch.send_nowait(event)
