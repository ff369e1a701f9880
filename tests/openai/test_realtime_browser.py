"""OpenAI's own JavaScript SDK (``OpenAIRealtimeWebSocket``, npm ``openai``, bundled in
``vendor/``) in real headless Chromium, against a real uvicorn on the checksum engine.

This is the key path browsers take: no headers, the key as the subprotocol
``openai-insecure-api-key.KEY`` after ``realtime``, which the server must choose (a browser
fails a connection whose offered subprotocols are all refused). The SDK itself builds the
URL from ``baseURL`` and sends the key; the page only hands it the key and the events.

The SDK refuses any URL but ``wss:``, so the gateway is reached through a TLS front of the
test's own (a self-signed certificate, generated here, that this page's Chromium is told to
accept): a byte pump from TLS to the gateway's plain port. The page is served as a file, by
a static server on another loopback port, as FunASR's HTML5 page is in
``tests/clients/test_funasr_html5.py``.

The bytes are verified as in ``test_realtime_live.py``: the checksum engine's text is
``"<samples>:<crc32>"`` of the 16 kHz audio the pool got, computed here from the WAV alone.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from anyio.abc import AnyByteStream, ByteReceiveStream, ByteSendStream, SocketAttribute
from anyio.streams.tls import TLSListener, TLSStream

from tests.gateway.checksums import checksum
from tests.gateway.uvicorn_server import Server, serve_blocking
from tests.openai.realtime_audio import COMPLETED, DELTA, noise, pool_audio, wav_file, wav_payload

pytest.importorskip(
    "playwright.async_api", reason="Playwright not installed: pip install -e '.[dev]'"
)
from playwright.async_api import Page

from tests.gateway.test_browser_page import CHROMIUM, browser_page, write_tone

VENDOR = Path(__file__).resolve().parent / "vendor"
KEY = "browser-realtime-key"
SERVER_ENV = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu", "ASR_API_KEYS": KEY}
APPEND_BYTES = 4801  # odd: samples split across appends
TIMEOUT_S = 20.0

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="Chromium not installed: apt-get install chromium"
    ),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("realtime-browser") / "server.log"
    with serve_blocking(SERVER_ENV, log, ready_timeout=60) as server:
        yield server


class VendoredFiles(SimpleHTTPRequestHandler):
    """The vendor folder's files, as they are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, directory=str(VENDOR), **kwargs)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # pytest shows the browser's side


@pytest.fixture(scope="module")
def static() -> Iterator[str]:
    """The base URL of a static file server for the vendor folder."""
    with ThreadingHTTPServer(("127.0.0.1", 0), VendoredFiles) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, name="realtime-browser-static")
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}"
        finally:
            httpd.shutdown()
            thread.join()


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory: pytest.TempPathFactory) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1."""
    pytest.importorskip("cryptography", reason="cryptography makes the certificate")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context


async def pump(source: ByteReceiveStream, sink: ByteSendStream) -> None:
    async for chunk in source:
        await sink.send(chunk)


class QuietTLSListener(TLSListener):
    """Chromium, told to accept the certificate, still drops its first handshake on it and
    connects again: that refusal is expected here, not an error to log."""

    @staticmethod
    async def handle_handshake_error(exc: BaseException, stream: AnyByteStream) -> None:
        await anyio.aclose_forcefully(stream)
        if not isinstance(exc, ssl.SSLError):
            raise exc


@asynccontextmanager
async def tls_front(context: ssl.SSLContext, port: int) -> AsyncIterator[int]:
    """A TLS listener on a free loopback port whose connections are piped, byte for byte,
    to the gateway's plain ``port``; yields its port. Either side's end ends both."""

    async def forward(client: TLSStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", port) as upstream:
            try:
                async with anyio.create_task_group() as pipes:

                    async def one_way(source: ByteReceiveStream, sink: ByteSendStream) -> None:
                        await pump(source, sink)
                        pipes.cancel_scope.cancel()

                    pipes.start_soon(one_way, client, upstream)
                    pipes.start_soon(one_way, upstream, client)
            except* (anyio.BrokenResourceError, anyio.ClosedResourceError, ssl.SSLError):
                pass  # a side went away mid-stream: the other is closed as it leaves

    inner = await anyio.create_tcp_listener(local_host="127.0.0.1")
    listener = QuietTLSListener(inner, context, standard_compatible=False)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, forward)
        yield inner.extra(SocketAttribute.local_port)
        group.cancel_scope.cancel()


@asynccontextmanager
async def sdk_page(tmp_path: Path, static: str) -> AsyncIterator[Page]:
    """The page in a fresh headless Chromium that accepts the TLS front's certificate."""
    tone = tmp_path / "tone.wav"  # browser_page's microphone; this page never records
    write_tone(tone)
    async with browser_page(CHROMIUM, tmp_path, tone) as page:
        cdp = await page.context.new_cdp_session(page)
        await cdp.send("Security.setIgnoreCertificateErrors", {"ignore": True})
        await page.goto(f"{static}/realtime.html")
        await page.wait_for_function("window.ready === true")
        yield page


async def connect(page: Page, tls_port: int, key: str) -> dict[str, Any]:
    """The SDK's connection; what the page saw of its opening."""
    opening: dict[str, Any] = await page.evaluate(
        "([key, base]) => window.connect(key, base)", [key, f"https://127.0.0.1:{tls_port}/v1"]
    )
    return opening


async def wait_for_event(page: Page, kind: str) -> None:
    await page.wait_for_function(
        "(kind) => window.events.some((event) => event.type === kind || event.type === 'error')",
        arg=kind,
    )


async def events(page: Page) -> list[dict[str, Any]]:
    received: list[dict[str, Any]] = await page.evaluate("window.events")
    return received


async def test_the_sdk_streams_a_24khz_buffer_and_gets_its_exact_transcript(
    gateway: Server, static: str, tls_context: ssl.SSLContext, tmp_path: Path
) -> None:
    rng = np.random.default_rng(2024)
    wav = wav_file(noise(rng, 2.5, 24000), 24000)
    expected = pool_audio(wav)
    payload = wav_payload(wav)
    appends = [
        {
            "type": "input_audio_buffer.append",
            "audio": base64.b64encode(payload[at : at + APPEND_BYTES]).decode(),
        }
        for at in range(0, len(payload), APPEND_BYTES)
    ]
    update = {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None}
            },
        },
    }
    async with tls_front(tls_context, gateway.port) as tls_port, sdk_page(tmp_path, static) as page:
        opening = await connect(page, tls_port, KEY)
        assert opening == {
            "opened": True,
            "url": f"wss://127.0.0.1:{tls_port}/v1/realtime?intent=transcription",
            "protocol": "realtime",
        }
        await wait_for_event(page, "session.created")
        await page.evaluate("(events) => window.send(events)", [update])
        await wait_for_event(page, "session.updated")
        await page.evaluate("(events) => window.send(events)", appends)
        await page.evaluate("window.send([{type: 'input_audio_buffer.commit'}])")
        await wait_for_event(page, COMPLETED)
        received = await events(page)
        errors = await page.evaluate("window.errors")
        await page.evaluate("window.disconnect()")
        await page.wait_for_function("window.closes.length > 0")
        closes = await page.evaluate("window.closes")

    assert errors == []
    assert closes == [{"code": 1000, "reason": "OK"}]  # the SDK's own close, answered
    kinds = [event["type"] for event in received]
    assert kinds[:2] == ["session.created", "session.updated"]
    session = received[1]["session"]
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["input"]["turn_detection"] is None
    # Deltas come as the streaming pass decodes, before the commit or after it.
    assert [kind for kind in kinds[2:] if kind != DELTA][:3] == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        COMPLETED,
    ]
    deltas = [event for event in received if event["type"] == DELTA]
    assert deltas, kinds
    assert deltas[-1]["delta"] == checksum(expected)
    (completed,) = [event for event in received if event["type"] == COMPLETED]
    assert completed["transcript"] == "".join(event["delta"] for event in deltas)
    assert {event["item_id"] for event in deltas} == {completed["item_id"]}


async def test_a_wrong_key_gets_no_session(
    gateway: Server, static: str, tls_context: ssl.SSLContext, tmp_path: Path
) -> None:
    refused = '"WebSocket /v1/realtime?intent=transcription" 401'
    refused_before = gateway.output().count(refused)
    async with tls_front(tls_context, gateway.port) as tls_port, sdk_page(tmp_path, static) as page:
        opening = await connect(page, tls_port, "wrong")
        received = await events(page)
        errors = await page.evaluate("window.errors")
        closes = await page.evaluate("window.closes")
    # The handshake's 401 is all a browser sees as 1006, and the SDK as an "error" event.
    assert opening["opened"] is False
    assert received == []
    assert errors
    assert [close["code"] for close in closes] == [1006]
    # ... and it was the gateway's 401, not the TLS front's handshake.
    assert gateway.output().count(refused) == refused_before + 1
