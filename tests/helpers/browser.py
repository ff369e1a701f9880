"""Real headless Chromium (Debian's) driving the browser page against a real uvicorn:
its fake microphone, the WebSocket traffic it sends, the page's status and counters."""

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

from bench.common import ROOT

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

    @property
    def results(self) -> list[dict[str, Any]]:
        """FunASR's frames, without our session, ack and error frames (those have a type)."""
        return [message for message in self.received if "type" not in message]


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


async def record(page: Page, http: str) -> float:
    """Open the page at ``http``, record in online mode for RECORD_S; the seconds between
    the first audio sent and the click on Stop, by the test's clock."""
    await page.goto(http + "/")
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
