"""The browser page's resumable session in real Chromium, loaded through the cutting
proxy: its WebSocket is cut mid-stream, and the page resumes it by itself with no sample
lost or sent twice."""

from __future__ import annotations

import json
import wave
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from bench.common.cutting_proxy import Cut, CuttingProxy, cutting_proxy
from bench.common.gateway import serve
from tests.helpers.browser import (
    API_KEY,
    RATE,
    SERVER_ENV,
    WAV_RATE,
    Traffic,
    browser_page,
    number,
    record,
    status,
)
from tests.helpers.checksums import checksum

pytest.importorskip(
    "playwright.async_api", reason="Playwright not installed: pip install -e '.[dev]'"
)
from playwright.async_api import WebSocket

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
