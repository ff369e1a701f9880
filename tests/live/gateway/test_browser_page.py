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
import wave
from pathlib import Path

import numpy as np
import pytest

from bench.common.gateway import serve
from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.browser import (
    API_KEY,
    ARTIFACTS,
    RATE,
    SERVER_ENV,
    TONE_HZ,
    Traffic,
    browser_page,
    number,
    record,
    status,
    write_tone,
)
from tests.helpers.checksums import END, checksum, config
from tests.helpers.loops import GatewayClient

pytest.importorskip(
    "playwright.async_api", reason="Playwright not installed: pip install -e '.[dev]'"
)


# -- served by the app (no browser) -------------------------------------------------------


def test_the_page_and_its_files_are_served_and_the_websocket_still_works() -> None:
    settings = GatewaySettings(pool=PoolSettings(model="checksum", devices=("cpu",)))
    with GatewayClient(create_app(settings)) as client:
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
