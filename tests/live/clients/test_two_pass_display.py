"""What FunASR's own clients show of a 2pass utterance while its sentences' offline decodes
are pending: its Python client (``vendor/funasr_wss_client.py``) and its HTML5 page
(``vendor/funasr_html5``), both unchanged, against a real uvicorn.

The checksum engine serves the streaming pass and a tiny random-weight Paraformer the
offline one, whose pool holds each decode open for ``ASR_OFFLINE_BATCH_WAIT_MS`` (1.5 s,
its batching window), so that the next sentence's partials come while the sentence before
is still being decoded. Each partial's text is ``"<samples>:<crc32>"`` of a prefix of its
sentence's audio, so the partials cut what the client sent into its sentences and say
which sentence each belongs to. What the client must show after every frame is then known
without reading the client's code: the settled sentences' offline texts, then every partial
received of the sentences not yet settled, each once, in order (but for the instant
between an offline frame, which clears them, and the resend right after it). Each client's
own display after every frame (the Python client prints it, the page logs it to its console) must be
exactly that, and in the end the offline texts joined.
"""

from __future__ import annotations

import math
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import checksum
from tests.helpers.funasr_clients import relay_to, run_client
from tests.helpers.live_gateway import RATE, Wav, assert_ended_quietly, log_mark
from tests.helpers.timing import within

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVER_ENV = {
    "ASR_MODEL": "checksum",
    "ASR_OFFLINE_MODEL": "synthetic:tiny",
    "ASR_DEVICES": "cpu",
    "ASR_OFFLINE_BATCH_WAIT_MS": "1500",
}
SPEECH_S, PAUSE_S = 1.5, 1.2  # the energy endpointer ends a sentence 0.8 s into a pause


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    folder = tmp_path_factory.mktemp("two-pass-display")
    async with serve(SERVER_ENV, folder / "server.log") as running:
        yield running


def partial_sentences(frames: list[dict[str, Any]], pcm: bytes) -> dict[int, int]:
    """The sentence of each partial, by its index in ``frames`` (resends left out).

    Partials come in sentence order, each the checksum of a longer prefix of its
    sentence's audio, so a sentence begins where the count of samples drops; its last
    partial (its streaming pass's final result) covers all of its audio, and the sentences
    together must be all of ``pcm``, one per offline frame."""
    runs: list[list[int]] = []
    previous = 0
    for index, frame in enumerate(frames):
        if frame["mode"] != "2pass-online" or frame.get("resent"):
            continue
        samples = int(frame["text"].split(":")[0])
        if not runs or samples <= previous:
            runs.append([])
        runs[-1].append(index)
        previous = samples
    offset = 0
    for run in runs:
        audio = pcm[offset : offset + 2 * int(frames[run[-1]]["text"].split(":")[0])]
        for index in run:
            text = frames[index]["text"]
            assert checksum(audio[: 2 * int(text.split(":")[0])]) == text, frames
        offset += len(audio)
    assert offset == len(pcm), "the sentences are all of the audio"
    assert len(runs) == sum(frame["mode"] == "2pass-offline" for frame in frames)
    return {index: sentence for sentence, run in enumerate(runs) for index in run}


def due_views(frames: list[dict[str, Any]], sentences: dict[int, int]) -> list[str]:
    """What a client must show after each frame: the settled sentences' offline texts,
    then every partial received of the others. The one exception: an offline frame
    clears every partial shown, so between it and the resend that must come next the
    client shows the offline texts alone."""
    settled: list[str] = []
    partials = [""] * (max(sentences.values()) + 1)
    views = []
    for index, frame in enumerate(frames):
        if frame["mode"] == "2pass-offline":
            settled.append(frame["text"])
        elif index in sentences:  # a resend adds nothing that was not shown
            partials[sentences[index]] += frame["text"]
        pending = "".join(partials[len(settled) :])
        resent_next = index + 1 < len(frames) and frames[index + 1].get("resent")
        if frame["mode"] == "2pass-offline" and pending:
            assert resent_next, f"frame {index} cleared partials that nothing gave back"
            pending = ""
        views.append("".join(settled) + pending)
    return views


def assert_partials_came_while_an_offline_decode_was_pending(
    frames: list[dict[str, Any]], sentences: dict[int, int]
) -> None:
    modes = [frame["mode"] for frame in frames]
    first_offline = modes.index("2pass-offline")
    assert 1 in [sentences.get(index) for index in range(first_offline)], frames
    assert any(frame.get("resent") for frame in frames), frames
    assert modes[-1] == "2pass-offline"
    assert [frame["is_final"] for frame in frames] == [False] * (len(frames) - 1) + [True]


def speech_with_pauses(sentences: int, rate: int = RATE) -> np.ndarray[Any, Any]:
    """Loud noise of SPEECH_S between pauses of PAUSE_S of silence, as int16."""
    rng = np.random.default_rng(7)
    pause = np.zeros(int(PAUSE_S * rate), dtype="<i2")
    parts = []
    for index in range(sentences):
        parts.append(rng.integers(-20000, 20000, int(SPEECH_S * rate), dtype="<i2"))
        if index < sentences - 1:
            parts.append(pause)
    return np.concatenate(parts)


def write_wav(path: Path, samples: np.ndarray[Any, Any], rate: int) -> None:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.astype("<i2").tobytes())


async def test_funasr_wss_client_shows_every_text_once_while_offline_decodes_are_pending(
    server: Gateway, tmp_path: Path
) -> None:
    """The client's defaults: 2pass, real time. It prints what it shows after each frame."""
    samples = speech_with_pauses(3)
    write_wav(tmp_path / "speech.wav", samples, RATE)
    wav = Wav("utt0", tmp_path / "speech.wav", samples.tobytes())
    mark = log_mark(server)
    async with relay_to(server) as relay:
        run = await run_client(relay.port, tmp_path, [wav])
    (frames,) = relay.frames
    *results, acknowledgement = frames
    assert acknowledgement["is_end"] is True
    sentences = partial_sentences(results, wav.pcm)
    assert max(sentences.values()) == 2  # three sentences
    assert_partials_came_while_an_offline_decode_was_pending(results, sentences)
    shown = [
        line.removeprefix("pid0_0: ")
        for line in run.stdout.splitlines()
        if line.startswith("pid0_0: ")
    ]
    offline_texts = "".join(f["text"] for f in results if f["mode"] == "2pass-offline")
    # The acknowledgement, a frame of mode "2pass", shows the offline texts again.
    assert shown == [*due_views(results, sentences), offline_texts], run.stdout
    await assert_ended_quietly(server, mark)


# -- FunASR's HTML5 page ------------------------------------------------------------------

try:  # the page's test needs Playwright (the modules skip without it); the client's not
    from playwright.async_api import ConsoleMessage

    from tests.helpers.browser import CHROMIUM, browser_page
    from tests.helpers.funasr_html5 import FunasrPage
except (ImportError, pytest.skip.Exception):
    CHROMIUM = Path("/nonexistent")

WAV_RATE = 48_000
TONE_HZ = 1000.0
RECORD_S = 7.5  # three sentences of the looped sound, and a fourth begun
STOP_TO_CLOSE_S = 3.0  # the page closes its socket this long after Stop


def write_tone_with_pauses(path: Path) -> None:
    """The fake microphone's sound: SPEECH_S of a 1 kHz tone (whole periods), then PAUSE_S
    of silence; Chromium loops it."""
    t = np.arange(int(SPEECH_S * WAV_RATE)) / WAV_RATE
    tone = (0.5 * 32767 * np.sin(2 * math.pi * TONE_HZ * t)).astype("<i2")
    write_wav(path, np.concatenate([tone, np.zeros(int(PAUSE_S * WAV_RATE), "<i2")]), WAV_RATE)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Chromium or Playwright not installed")
async def test_funasr_html5_page_shows_every_text_once_while_offline_decodes_are_pending(
    static: str, server: Gateway, tmp_path: Path
) -> None:
    """Mic mode, 2pass. The page logs ``rec_text``, what its text box shows, after each
    frame."""
    sound = tmp_path / "speech.wav"
    write_tone_with_pauses(sound)
    async with browser_page(CHROMIUM, tmp_path, sound) as page:
        shown: list[str] = []

        def logged(message: ConsoleMessage) -> None:
            if message.text.startswith("rec_text: "):
                shown.append(message.text.removeprefix("rec_text: "))

        page.on("console", logged)
        funasr = FunasrPage(page, static, server)
        await funasr.open()
        await page.check("input[name=asr_mode][value='2pass']")
        await page.click("#btnConnect")
        await funasr.wait_enabled("btnStart")
        await page.click("#btnStart")
        await funasr.wait_enabled("btnStop")
        with within(STOP_TO_CLOSE_S * 5):
            await funasr.audio_sent.wait()
        await anyio.sleep(RECORD_S)
        await page.click("#btnStop")
        outcome = await funasr.outcome("mic-2pass-pending")

    assert outcome.error_frames == []
    results = outcome.received
    sentences = partial_sentences(results, outcome.sent_audio)
    assert max(sentences.values()) >= 2  # three sentences or more
    assert_partials_came_while_an_offline_decode_was_pending(results, sentences)
    assert shown == due_views(results, sentences)
    offline_texts = "".join(f["text"] for f in results if f["mode"] == "2pass-offline")
    assert outcome.transcript == offline_texts
