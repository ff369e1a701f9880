"""The browser page (``gateway/static``): served by the app, and driven in real headless
Chromium against a real uvicorn with the checksum engine.

Chromium's fake microphone plays a WAV this test writes: a 1 kHz tone at 48 kHz. The page
must mix it to mono, resample it to 16 kHz and stream it as s16le. The checksum engine's
final text, ``"<samples>:<crc32>"`` of everything the server received, is compared with
what the page says it sent and with the WebSocket frames Chromium actually sent; the count
with the audio the page captured; the tone's frequency in the sent PCM with 1 kHz (sent at
the wrong rate it would be 333 Hz).

The page's session is resumable: loaded through the cutting proxy, its WebSocket is cut
mid-stream, and the page must resume it by itself with no sample lost or sent twice.
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
from urllib.parse import parse_qs, urlsplit

import anyio
import numpy as np
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.gateway.checksums import END, checksum, config
from tests.gateway.cutting_proxy import Cut, CuttingProxy, cutting_proxy
from tests.gateway.uvicorn_server import ROOT, serve

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

    @property
    def results(self) -> list[dict[str, Any]]:
        """FunASR's frames, without our session, ack and error frames (those have a type)."""
        return [message for message in self.received if "type" not in message]


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
        wall_s = await record(page, server.http)
        kind, text = await status(page)
        ARTIFACTS.mkdir(exist_ok=True)
        screenshot = ARTIFACTS / "browser-page.png"
        await page.screenshot(path=screenshot, full_page=True)
        print(f"screenshot: {screenshot}")
        assert kind == "done", text
        sent = int(await number(page, "#samples-sent"))
        captured_s = await number(page, "#captured-seconds")
        results_shown = int(await number(page, "#results-received"))
        transcript = await page.locator("#transcript").inner_text()

    config_sent = json.loads(traffic.sent_text[0])
    assert config_sent["mode"] == "online"
    assert config_sent["chunk_size"] == [5, 10, 5]
    assert config_sent["is_speaking"] is True
    assert config_sent["resumable"] is True
    assert json.loads(traffic.sent_text[-1]) == {"is_speaking": False}
    assert traffic.received[0]["type"] == "session"
    results = traffic.results
    assert results_shown == len(results)
    finals = [message for message in results if message["is_final"]]
    assert len(finals) == 1
    assert results[-1] is finals[0]
    partials = results[:-1]
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


# -- resuming -----------------------------------------------------------------------------

# Client to server bytes after which the page's first WebSocket is cut: past the handshake
# and the config, about 1.2 s into RECORD_S's audio (32 kB a second), in mid-frame. Chromium
# deflates its frames (a tone shrinks to almost nothing): the microphone plays noise here.
CUT_UP_BYTES = 40_000

# Every status the page shows, in order: the reconnecting one lasts a moment only.
RECORD_STATUSES = """
window.statuses = [];
document.addEventListener("DOMContentLoaded", () => {
  const status = document.getElementById("status");
  const note = () => window.statuses.push([status.dataset.kind ?? "", status.textContent]);
  new MutationObserver(note).observe(status, {
    attributes: true, childList: true, characterData: true, subtree: true,
  });
});
"""

# The page's resume bookkeeping, fed by hand: its own module, as the page loaded it.
BOOK_CHECK = """async () => {
  const { ResumeBook } = await import("/static/page.js");
  const session = (fields) => ({
    type: "session", id: "s", resume_token: "t1", resume_window_s: 30, resumed: false,
    utterance: 1, samples: 0, input_ended: false, last_result: 0, ...fields,
  });
  const book = new ResumeBook();
  book.opened(session({}));
  for (let i = 0; i < 4; i++) book.append(new Int16Array(100).fill(i).buffer);
  const firstSent = book.takeUnsent().length;
  book.acked(1, 250); // two chunks taken whole; the third holds sample 250
  const kept = book.keptSamples;
  const dropped = [1, 2, 2, 3].map((id) => book.isDuplicate({ result_id: id }));
  const url = book.resumeUrl("ws://host/?token=key");
  const sending = book.opened(session({ resumed: true, resume_token: "t2", samples: 250 }));
  const resent = book.takeUnsent().map((pcm) => [new Int16Array(pcm)[0], pcm.byteLength]);
  let refused = null;
  try {
    book.opened(session({ resumed: true, resume_token: "t3", samples: 10 })); // before an ack
  } catch (error) {
    refused = error.message;
  }
  return { firstSent, kept, dropped, url, sending, resent, refused, token: book.token };
}"""


def write_noise(path: Path) -> None:
    """Two seconds of seeded white noise at half scale, which deflate cannot shrink much."""
    rng = np.random.default_rng(7)
    samples = rng.uniform(-0.5 * 32767, 0.5 * 32767, 2 * WAV_RATE).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(WAV_RATE)
        out.writeframes(samples.tobytes())


@asynccontextmanager
async def cut_first_stream(port: int) -> AsyncIterator[CuttingProxy]:
    """A proxy to ``port`` that cuts the first connection to send CUT_UP_BYTES up (the
    page's HTTP requests are far smaller: only a WebSocket streaming audio gets there) and
    lets every connection accepted after that cut through."""
    proxies: list[CuttingProxy] = []

    def plan(index: int) -> Cut | None:
        cut_already = any(connection.cut for connection in proxies[0].connections[:index])
        return None if cut_already else Cut(up_bytes=CUT_UP_BYTES)

    async with cutting_proxy(port, plan) as proxy:
        proxies.append(proxy)
        yield proxy


@pytest.mark.anyio
@pytest.mark.slow
async def test_the_page_resumes_a_dropped_connection_and_loses_no_audio(
    chromium: Path, tmp_path: Path
) -> None:
    wav = tmp_path / "noise.wav"
    write_noise(wav)
    sockets: list[tuple[str, Traffic]] = []

    def watch(ws: WebSocket) -> None:
        traffic = Traffic()
        traffic.watch(ws)
        sockets.append((ws.url, traffic))

    async with (
        serve(SERVER_ENV, tmp_path / "server.log") as server,
        cut_first_stream(server.port) as proxy,
        browser_page(chromium, tmp_path, wav) as page,
    ):
        await page.add_init_script(RECORD_STATUSES)
        page.on("websocket", watch)
        await record(page, f"http://127.0.0.1:{proxy.port}")
        kind, text = await status(page)
        assert kind == "done", text
        statuses: list[list[str]] = await page.evaluate("window.statuses")
        sent = int(await number(page, "#samples-sent"))
        captured_s = await number(page, "#captured-seconds")
        results_shown = int(await number(page, "#results-received"))
        resumes_shown = await page.locator("#resumes").inner_text()
        book = await page.evaluate(BOOK_CHECK)

    assert [connection.cut_by for connection in proxy.connections].count("up_bytes") == 1
    assert len(sockets) == 2, [url for url, _ in sockets]
    (first_url, first), (resume_url, second) = sockets
    assert "resumed once" in text
    assert resumes_shown == "1"

    # It said so while it reconnected, and went back to its normal status after.
    reconnecting = [i for i, (kind, text) in enumerate(statuses) if "reconnecting…" in text]
    assert reconnecting, statuses
    assert {statuses[i][0] for i in reconnecting} == {"reconnecting"}
    after = statuses[reconnecting[-1] + 1]
    assert after[0] == "info", statuses
    assert after[1].startswith(("Recording", "Stopping", "Waiting")), statuses

    # The resume URL: the key kept, the newest token and the highest result_id it had.
    opened = first.received[0]
    assert opened["type"] == "session"
    assert opened["resumed"] is False
    query = parse_qs(urlsplit(resume_url).query)
    assert query.pop("token") == [API_KEY]
    first_ids = [message["result_id"] for message in first.results]
    assert query == {"resume": [opened["resume_token"]], "last_result": [str(max(first_ids))]}
    assert urlsplit(first_url).query == f"token={API_KEY}"

    # The resumed connection: no config again, the audio from where the server got to (the
    # same bytes the first connection had sent from there on), then the end frame.
    resumed = second.received[0]
    assert resumed["type"] == "session"
    assert resumed["resumed"] is True
    assert resumed["input_ended"] is False  # cut while recording: the end had not gone
    assert [json.loads(frame) for frame in second.sent_text] == [{"is_speaking": False}]
    taken = 2 * resumed["samples"]
    first_pcm, second_pcm = b"".join(first.sent_pcm), b"".join(second.sent_pcm)
    assert 0 < taken <= len(first_pcm)
    assert second_pcm.startswith(first_pcm[taken:])

    # Each sample once: the server's checksum is that of exactly what the page says it sent,
    # and that is all the audio it captured, the drop included.
    pcm = first_pcm[:taken] + second_pcm
    results = first.results + [m for m in second.results if m["result_id"] > max(first_ids)]
    assert results[-1]["is_final"] is True
    assert results[-1]["text"] == checksum(pcm)
    assert len(pcm) // 2 == sent
    assert sent / RATE == pytest.approx(captured_s, rel=0.01)
    assert results_shown == len(results)
    assert [m["result_id"] for m in results] == list(range(1, len(results) + 1))

    # The bookkeeping alone: acked audio dropped, the resend from inside a kept chunk,
    # replayed results dropped, a resume before an ack refused.
    assert book == {
        "firstSent": 4,
        "kept": 200,
        "dropped": [False, False, True, False],
        "url": "ws://host/?token=key&resume=t1&last_result=3",
        "sending": {"sendEnd": True},
        "resent": [[2, 100], [3, 200]],
        "refused": "the server says it took 10 samples; it had acknowledged 200"
        " and this page captured 400",
        "token": "t2",
    }
