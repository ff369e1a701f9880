"""FunASR's own HTML5 page (``tests/live/clients/vendor/funasr_html5``, unchanged) in real
headless Chromium, driven as a person would: its WebSocket address typed in, mic mode or a
file chosen, what it showed and what went over its WebSocket collected.

A script added before the page's own only records each WebSocket's close code; the page
cannot tell it is there. Requests off this machine (the recorder's tracking pixel) are
aborted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from bench.common import ROOT
from bench.common.gateway import Gateway
from tests.helpers.browser import Traffic
from tests.helpers.timing import within

pytest.importorskip(
    "playwright.async_api", reason="Playwright not installed: pip install -e '.[dev]'"
)
from playwright.async_api import Dialog, FileChooser, Page, Route, WebSocket

ARTIFACTS = ROOT / "test-artifacts"
RECORD_S = 2.5
# The page closes its socket 3 s after Stop in mic mode; all else is quicker.
TIMEOUT_S = 15.0

OFF_THIS_MACHINE = re.compile(r"^(?!(http|ws)://127\.0\.0\.1[:/])")

# Records every WebSocket's close event (code, reason) in window.__closes.
WATCH_CLOSES = """
window.__closes = [];
window.WebSocket = class extends window.WebSocket {
    constructor(...args) {
        super(...args);
        this.addEventListener("close", (event) =>
            window.__closes.push({ code: event.code, reason: event.reason }));
    }
};
"""


async def abort(route: Route) -> None:
    await route.abort()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the page showed and what went over its WebSocket."""

    transcript: str
    closes: list[dict[str, Any]]
    alerts: list[str]
    sent_text: list[dict[str, Any]]
    sent_audio: bytes
    received: list[dict[str, Any]]

    @property
    def error_frames(self) -> list[dict[str, Any]]:
        return [message for message in self.received if message.get("type") == "error"]


class FunasrPage:
    """The vendored page, driven as a person would."""

    def __init__(
        self, page: Page, static: str, server: Gateway, address: str | None = None
    ) -> None:
        self.page = page
        self.static = static
        self.server = server
        self.address = address or server.url
        self.traffic = Traffic()
        self.alerts: list[str] = []
        self.audio_sent = anyio.Event()

    async def open(self) -> None:
        await self.page.route(OFF_THIS_MACHINE, abort)
        await self.page.add_init_script(WATCH_CLOSES)
        self.page.on("websocket", self._watch)
        self.page.on("dialog", self._dismiss)
        await self.page.goto(f"{self.static}/static/index.html")
        address = self.page.locator("#wssip")
        await address.fill(self.address)
        await address.press("Tab")  # its onchange fires as the box loses focus

    def _watch(self, ws: WebSocket) -> None:
        self.traffic.watch(ws)
        ws.on("framesent", self._sent)

    def _sent(self, payload: str | bytes) -> None:
        if isinstance(payload, bytes):
            self.audio_sent.set()

    async def _dismiss(self, dialog: Dialog) -> None:
        self.alerts.append(dialog.message)
        await dialog.dismiss()

    async def wait_enabled(self, button: str) -> None:
        await self.page.wait_for_function(f"!document.getElementById('{button}').disabled")

    async def record(self, mode: str) -> None:
        """Mic mode in ``mode``: connect, start, record RECORD_S of audio, stop."""
        await self.page.check(f"input[name=asr_mode][value='{mode}']")
        await self.page.click("#btnConnect")
        await self.wait_enabled("btnStart")
        await self.page.click("#btnStart")
        await self.wait_enabled("btnStop")
        with within(TIMEOUT_S):
            await self.audio_sent.wait()
        await anyio.sleep(RECORD_S)  # the recording's length
        await self.page.click("#btnStop")

    async def send_file(self, path: Path, sample_rate: int | None) -> None:
        """File mode: pick the mode, choose ``path`` in the file dialog, connect.

        ``sample_rate``: what the page reads from a WAV file's header (None: not a WAV).
        """
        await self.page.check("input[name=recoder_mode][value=file]")
        # Clicking the file input is what re-enables Connect (upfile.onclick).
        async with self.page.expect_file_chooser() as chosen:
            await self.page.click("#upfile")
        chooser: FileChooser = await chosen.value
        await chooser.set_files(path)
        await self.page.wait_for_function("window.file_data_array !== undefined")
        if sample_rate is not None:
            await self.page.wait_for_function(f"window.file_sample_rate === {sample_rate}")
        await self.page.click("#btnConnect")

    async def outcome(self, case: str) -> Outcome:
        """Wait for the socket to close (by either side), screenshot, and collect."""
        await self.page.wait_for_function("window.__closes.length > 0", timeout=TIMEOUT_S * 1000)
        ARTIFACTS.mkdir(exist_ok=True)
        await self.page.screenshot(path=ARTIFACTS / f"funasr-html5-{case}.png", full_page=True)
        return Outcome(
            transcript=await self.page.locator("#varArea").input_value(),
            closes=await self.page.evaluate("window.__closes"),
            alerts=self.alerts,
            sent_text=[json.loads(text) for text in self.traffic.sent_text],
            sent_audio=b"".join(self.traffic.sent_pcm),
            received=self.traffic.received,
        )
