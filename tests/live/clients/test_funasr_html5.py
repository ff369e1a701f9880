"""FunASR's own HTML5 page (``vendor/funasr_html5``, unchanged) in real headless Chromium,
against a real uvicorn with the checksum engine.

The page's files are served as they are from the vendor folder, under ``/static/``, by a
static file server of the test's own on another loopback port, as FunASR's ``h5Server.py``
serves them (a page that Playwright fulfils itself counts as public to Chromium, which then
blocks its WebSocket to loopback). Its WebSocket address is typed into its ``#wssip`` box;
every click is a person's; requests off this machine (the recorder's tracking pixel) are
aborted. Each result's text is ``"<samples>:<crc32>"`` of the audio the server received, so
what the page shows is compared with the checksum of the binary frames Chromium actually
sent. A script added before the page's own only records each WebSocket's close code; the
page cannot tell it is there.
"""

from __future__ import annotations

import math
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import checksum
from tests.helpers.live_gateway import TWO_CHECKSUM_MODELS, chunks_by_model

pytest.importorskip(
    "playwright.async_api", reason="Playwright not installed: pip install -e '.[dev]'"
)

from tests.helpers.browser import CHROMIUM, browser_page, write_tone
from tests.helpers.funasr_html5 import RECORD_S, FunasrPage

# 2pass: the sentence's offline pass gets all of its audio, however long the page's
# recorder takes to deliver sound, so that its text is the checksum of everything sent.
SERVER_ENV = {"ASR_DEVICES": "cpu", "ASR_SENTENCE_PREROLL_MS": "60000"}
# Two model-free models: the default, and one the page reaches by ?model= in its address.
MODELS = TWO_CHECKSUM_MODELS
RATE = 16_000

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="Chromium not installed: apt-get install chromium"
    ),
]


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    folder = tmp_path_factory.mktemp("funasr-html5")
    (folder / "models.toml").write_text(MODELS)
    env = {**SERVER_ENV, "ASR_MODELS": str(folder / "models.toml")}
    async with serve(env, folder / "server.log") as running:
        yield running


def write_wav(path: Path, rate: int, seconds: float) -> bytes:
    """A 440 Hz tone, mono, 16-bit; the file's bytes."""
    t = np.arange(int(rate * seconds)) / rate
    samples = (0.3 * 32767 * np.sin(2 * math.pi * 440.0 * t)).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path.read_bytes()


@pytest.fixture
def tone(tmp_path: Path) -> Path:
    """The fake microphone's sound (a 1 kHz tone at 48 kHz, looped)."""
    path = tmp_path / "tone.wav"
    write_tone(path)
    return path


# -- mic mode -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["2pass", "online", "offline"])
async def test_mic_mode_shows_the_final_result_of_everything_the_page_sent(
    static: str, server: Gateway, tmp_path: Path, tone: Path, mode: str
) -> None:
    async with browser_page(CHROMIUM, tmp_path, tone) as page:
        funasr = FunasrPage(page, static, server)
        await funasr.open()
        await funasr.record(mode)
        outcome = await funasr.outcome(f"mic-{mode}")

    assert outcome.error_frames == []
    assert outcome.alerts == []
    config, end = outcome.sent_text
    assert config["mode"] == mode
    assert config["is_speaking"] is True
    assert end["is_speaking"] is False
    assert end["mode"] == mode  # an end that carries config fields
    pcm = outcome.sent_audio
    assert len(pcm) / 2 / RATE >= RECORD_S / 2
    finals = [message for message in outcome.received if message["is_final"]]
    assert finals == [outcome.received[-1]]
    assert finals[0]["text"] == checksum(pcm)
    assert "undefined" not in outcome.transcript
    modes = [message["mode"] for message in outcome.received]
    if mode == "online":
        # Partials are deltas, appended one after another; the final comes last.
        assert set(modes) == {"online"}
        assert len(modes) >= 3
        assert outcome.transcript == "".join(m["text"] for m in outcome.received)
        assert outcome.transcript.endswith(checksum(pcm))
    else:
        # offline_text: the offline result replaces the partials shown before it.
        if mode == "2pass":
            assert modes[-1] == "2pass-offline"
            assert modes.count("2pass-online") >= 3
        else:
            assert modes == ["offline"]
        assert outcome.transcript == checksum(pcm)
    # The page closed its socket itself, 3 s after Stop, and without a code.
    assert [close["code"] for close in outcome.closes] == [1005]


# -- file mode ----------------------------------------------------------------------------


async def test_file_mode_shows_the_offline_result_of_the_whole_file(
    static: str, server: Gateway, tmp_path: Path, tone: Path
) -> None:
    wav = tmp_path / "speech.wav"
    data = write_wav(wav, RATE, 1.5)
    async with browser_page(CHROMIUM, tmp_path, tone) as page:
        funasr = FunasrPage(page, static, server)
        await funasr.open()
        await funasr.send_file(wav, RATE)
        outcome = await funasr.outcome("file-16k")

    assert outcome.error_frames == []
    assert outcome.alerts == []
    config, end = outcome.sent_text
    assert config["mode"] == "offline"
    assert config["wav_format"] == "PCM"
    assert config["audio_fs"] == RATE
    assert end["is_speaking"] is False
    # The whole file, its header too, in 960-byte pieces.
    assert outcome.sent_audio == data
    assert outcome.sent_audio[:4] == b"RIFF"
    (final,) = outcome.received
    assert final["mode"] == "offline"
    assert final["is_final"] is True
    assert outcome.transcript == checksum(data)
    # The page closed the socket on is_final, without a code.
    assert [close["code"] for close in outcome.closes] == [1005]


async def test_the_page_reaches_another_model_by_model_in_its_address(
    static: str, server: Gateway, tmp_path: Path, tone: Path
) -> None:
    wav = tmp_path / "speech.wav"
    data = write_wav(wav, RATE, 1.0)
    before = await chunks_by_model(server)
    address = f"{server.url.rstrip('/')}/?model=other"
    async with browser_page(CHROMIUM, tmp_path, tone) as page:
        funasr = FunasrPage(page, static, server, address)
        await funasr.open()
        await funasr.send_file(wav, RATE)
        outcome = await funasr.outcome("file-other-model")
    assert outcome.error_frames == []
    assert outcome.transcript == checksum(data)
    after = await chunks_by_model(server)
    # The other model's worker decoded it; the default's did nothing.
    assert after.get("other", 0) > before.get("other", 0)
    assert after.get("checksum", 0) == before.get("checksum", 0)


async def test_file_mode_8_khz_is_resampled_and_shows_its_result(
    static: str, server: Gateway, tmp_path: Path, tone: Path
) -> None:
    wav = tmp_path / "speech-8k.wav"
    data = write_wav(wav, 8000, 1.0)
    async with browser_page(CHROMIUM, tmp_path, tone) as page:
        funasr = FunasrPage(page, static, server)
        await funasr.open()
        await funasr.send_file(wav, 8000)
        outcome = await funasr.outcome("file-8k")

    assert outcome.error_frames == []
    assert outcome.alerts == []
    assert outcome.sent_text[0]["audio_fs"] == 8000
    assert outcome.sent_audio == data  # the header too, resampled with the samples
    (final,) = outcome.received
    assert final["is_final"] is True
    assert outcome.transcript == final["text"]
    samples, _ = outcome.transcript.split(":")
    assert int(samples) == len(data) // 2 * RATE // 8000
    assert [close["code"] for close in outcome.closes] == [1005]


@pytest.mark.parametrize(
    ("case", "name", "sample_rate", "refused_field"),
    [
        ("file-96k", "speech.wav", 96_000, "audio_fs"),
        ("file-mp3", "speech.mp3", None, "wav_format"),
    ],
)
async def test_file_mode_refused_input_shows_no_undefined(
    static: str,
    server: Gateway,
    tmp_path: Path,
    tone: Path,
    case: str,
    name: str,
    sample_rate: int | None,
    refused_field: str,
) -> None:
    upload = tmp_path / name
    if sample_rate is None:
        upload.write_bytes(b"ID3\x04\x00\x00\x00\x00\x00\x00" + bytes(4000))  # not decoded
    else:
        write_wav(upload, sample_rate, 1.0)
    async with browser_page(CHROMIUM, tmp_path, tone) as page:
        funasr = FunasrPage(page, static, server)
        await funasr.open()
        await funasr.send_file(upload, sample_rate)
        outcome = await funasr.outcome(case)

    config = outcome.sent_text[0]
    assert refused_field in config
    (error,) = outcome.error_frames
    assert error["code"] == 1008
    assert refused_field in error["message"]
    assert [close["code"] for close in outcome.closes] == [1008]
    assert outcome.alerts == []
    assert "undefined" not in outcome.transcript
