"""The browser page (``gateway/static``): served by the app, and driven in real headless
Chromium against a real uvicorn with the checksum engine.

Chromium's fake microphone plays a WAV this test writes: a 1 kHz tone at 48 kHz. The page
must mix it to mono, resample it to 16 kHz and stream it as s16le. The checksum engine's
final text, ``"<samples>:<crc32>"`` of everything the server received, is compared with
what the page says it sent and with the WebSocket frames Chromium actually sent; the count
with the audio the page captured; the tone's frequency in the sent PCM with 1 kHz (sent at
the wrong rate it would be 333 Hz).
"""

from __future__ import annotations

import json
import math
import time
import wave
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.gateway.checksums import END, checksum, config
from tests.gateway.uvicorn_server import ROOT, Server, serve

pytest.importorskip(
    "playwright.async_api", reason="Playwright not installed: pip install -e '.[dev]'"
)
from playwright.async_api import Page, WebSocket, async_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"  # kept after the run; in .gitignore
API_KEY = "page-test-key"
SERVER_ENV = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_API_KEYS": API_KEY}
TONE_HZ = 1000.0
WAV_RATE = 48_000
RATE = 16_000
RECORD_S = 3.0
TIMEOUT_S = 20.0


# -- served by the app (no browser) -------------------------------------------------------


def test_the_page_and_its_files_are_served_and_the_websocket_still_works() -> None:
    settings = GatewaySettings(pool=PoolSettings(model="checksum", devices=("cpu",)))
    with TestClient(create_app(settings)) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert 'src="/static/page.js"' in page.text
        assert 'href="/static/page.css"' in page.text
        script = client.get("/static/page.js")
        assert '"/static/recorder-worklet.js"' in script.text
        for served in [script, client.get("/static/recorder-worklet.js")]:
            assert served.status_code == 200
            assert "javascript" in served.headers["content-type"]
        assert client.get("/static/page.css").headers["content-type"].startswith("text/css")
        assert client.get("/static/missing.js").status_code == 404

        pcm = bytes(range(256)) * 40
        with client.websocket_connect("/", subprotocols=["binary"]) as ws:
            ws.send_text(config())
            ws.send_bytes(pcm)
            ws.send_text(END)
            while not (message := ws.receive_json())["is_final"]:
                pass
        assert message["text"] == checksum(pcm)


# -- in Chromium --------------------------------------------------------------------------


def write_tone(path: Path) -> None:
    """Two seconds of a 1 kHz tone at half scale: whole periods, so it loops seamlessly."""
    t = np.arange(2 * WAV_RATE) / WAV_RATE
    samples = (0.5 * 32767 * np.sin(2 * math.pi * TONE_HZ * t)).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(WAV_RATE)
        out.writeframes(samples.tobytes())


@dataclass
class Traffic:
    """The page's WebSocket frames, as Chromium sent and received them."""

    sent_text: list[str] = field(default_factory=list)
    sent_pcm: list[bytes] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)

    def watch(self, ws: WebSocket) -> None:
        ws.on("framesent", self._sent)
        ws.on("framereceived", self._received)

    def _sent(self, payload: str | bytes) -> None:
        if isinstance(payload, bytes):
            self.sent_pcm.append(payload)
        else:
            self.sent_text.append(payload)

    def _received(self, payload: str | bytes) -> None:
        self.received.append(json.loads(payload))


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.skip("Chromium not installed: apt-get install chromium")
    return CHROMIUM


@asynccontextmanager
async def browser_page(chromium: Path, tmp_path: Path, fake_audio: Path) -> AsyncIterator[Page]:
    """A fresh headless Chromium whose microphone plays ``fake_audio`` in a loop."""
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            tmp_path / "chromium-profile",
            executable_path=chromium,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--use-fake-ui-for-media-stream",
                "--use-fake-device-for-media-stream",
                # Looped (no %noloop): the tone plays whenever the recording starts.
                f"--use-file-for-fake-audio-capture={fake_audio}",
            ],
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()
            page.set_default_timeout(TIMEOUT_S * 1000)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page
            assert not errors, errors
        finally:
            await context.close()


async def status(page: Page) -> tuple[str, str]:
    """Wait for the recording to end well or badly; its status kind and text."""
    element = page.locator("#status")
    await page.wait_for_function(
        "['done', 'error'].includes(document.getElementById('status').dataset.kind)"
    )
    return await element.get_attribute("data-kind") or "", await element.inner_text()


async def number(page: Page, selector: str) -> float:
    return float(await page.locator(selector).inner_text())


async def record(page: Page, server: Server) -> float:
    """Open the page, record in online mode for RECORD_S; the seconds between the first
    audio sent and the click on Stop, by the test's clock."""
    await page.goto(server.http + "/")
    await page.get_by_label("API key").fill(API_KEY)
    await page.get_by_label("online: partials only").check()
    await page.get_by_role("button", name="Start").click()
    await page.wait_for_function("Number(document.getElementById('samples-sent').textContent) > 0")
    started = time.monotonic()
    await anyio.sleep(RECORD_S)  # the recording's length is the point here
    # Partials are on the page while it records.
    assert await number(page, "#results-received") >= 3
    assert await page.locator("#transcript .partial").inner_text()
    stop_pressed = time.monotonic()
    await page.get_by_role("button", name="Stop").click()
    return stop_pressed - started


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_page_streams_the_microphone_at_16_khz_and_shows_results(
    chromium: Path, tmp_path: Path
) -> None:
    wav = tmp_path / "tone.wav"
    write_tone(wav)
    traffic = Traffic()
    async with (
        serve(SERVER_ENV, tmp_path / "server.log") as server,
        browser_page(chromium, tmp_path, wav) as page,
    ):
        page.on("websocket", traffic.watch)
        wall_s = await record(page, server)
        kind, text = await status(page)
        ARTIFACTS.mkdir(exist_ok=True)
        screenshot = ARTIFACTS / "browser-page.png"
        await page.screenshot(path=screenshot, full_page=True)
        print(f"screenshot: {screenshot}")
        assert kind == "done", text
        sent = int(await number(page, "#samples-sent"))
        captured_s = await number(page, "#captured-seconds")
        transcript = await page.locator("#transcript").inner_text()

    config_sent = json.loads(traffic.sent_text[0])
    assert config_sent["mode"] == "online"
    assert config_sent["chunk_size"] == [5, 10, 5]
    assert config_sent["is_speaking"] is True
    assert json.loads(traffic.sent_text[-1]) == {"is_speaking": False}
    finals = [message for message in traffic.received if message["is_final"]]
    assert len(finals) == 1
    assert traffic.received[-1] is finals[0]
    partials = traffic.received[:-1]
    assert len(partials) >= 3
    assert transcript.startswith(partials[0]["text"])

    # (b) The server received exactly what the page counted, and what Chromium sent.
    pcm = b"".join(traffic.sent_pcm)
    assert finals[0]["text"] == checksum(pcm)
    assert len(pcm) // 2 == sent
    # (c) 16 kHz: as many samples as the audio the page captured lasted (by the audio
    # clock), which is about the time the test let it record.
    assert sent / RATE == pytest.approx(captured_s, rel=0.01)
    assert captured_s == pytest.approx(wall_s, rel=0.15)
    # ... and resampled, not just counted: the tone is still at 1 kHz.
    tone = np.frombuffer(pcm, "<i2").astype(np.float64)[RATE // 4 :]
    spectrum = np.abs(np.fft.rfft(tone * np.hanning(len(tone))))
    peak_hz = np.argmax(spectrum) * RATE / len(tone)
    assert peak_hz == pytest.approx(TONE_HZ, abs=5.0)
    rms = math.sqrt(float(np.mean(tone**2)))
    assert rms == pytest.approx(0.5 * 32767 / math.sqrt(2), rel=0.2)


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_page_is_labelled_and_says_why_a_session_is_refused_or_closed(
    chromium: Path, tmp_path: Path
) -> None:
    wav = tmp_path / "tone.wav"
    write_tone(wav)
    upload = tmp_path / "half-second.wav"
    with wave.open(str(upload), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(bytes(RATE))  # 8000 samples of silence
    env = {**SERVER_ENV, "ASR_MAX_SESSION_SECONDS": "1"}
    async with (
        serve(env, tmp_path / "server.log") as server,
        browser_page(chromium, tmp_path, wav) as page,
    ):
        await page.goto(server.http + "/")
        unlabelled = await page.evaluate(
            """() => [...document.querySelectorAll('input, button, select, textarea')]
                .filter((el) => el.tagName === 'BUTTON'
                    ? !el.textContent.trim()
                    : !(el.labels && el.labels.length && el.labels[0].textContent.trim()))
                .map((el) => el.outerHTML)"""
        )
        assert unlabelled == []
        assert await page.locator("[aria-live]").count() >= 2

        # By keyboard: Enter on the focused Start button, with a wrong key.
        await page.get_by_label("API key").fill("wrong-key")
        await page.get_by_role("button", name="Start").focus()
        await page.keyboard.press("Enter")
        kind, text = await status(page)
        assert kind == "error"
        assert "Could not connect" in text
        assert "API key" in text
        assert "wrong-key" not in text
        assert await page.get_by_role("button", name="Start").is_enabled()
        assert await page.get_by_role("button", name="Stop").is_disabled()

        # The file picker: refused with the wrong key, transcribed with the right one.
        await page.get_by_label("WAV file").set_input_files(upload)
        await page.get_by_role("button", name="Transcribe file").click()
        await page.wait_for_function(
            "document.getElementById('file-status').dataset.kind === 'error'"
        )
        assert "HTTP 401" in await page.locator("#file-status").inner_text()
        assert "not valid" in await page.locator("#file-result").inner_text()
        await page.get_by_label("API key").fill(API_KEY)
        await page.get_by_role("button", name="Transcribe file").click()
        await page.wait_for_function(
            "document.getElementById('file-status').dataset.kind === 'done'"
        )
        assert await page.locator("#file-result").inner_text() == checksum(bytes(RATE))

        # Our error frame's message and the close code, when the server ends the session.
        await page.get_by_role("button", name="Start").click()
        await page.wait_for_function("!document.getElementById('start').disabled")
        kind, text = await status(page)
        assert kind == "error"
        assert "close code 1008" in text
        assert "maximum length of 1 s (ASR_MAX_SESSION_SECONDS)" in text
