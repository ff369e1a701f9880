"""gateway.files.fetch: each hop resolved once, checked, and connected to the address checked."""

from __future__ import annotations

import http.server
import ipaddress
import threading
from collections.abc import Iterator
from typing import ClassVar

import httpx
import pytest

from gateway.files import fetch as fetch_module
from gateway.files.errors import TranscribeError
from gateway.files.fetch import IPAddress, PinnedTransport, check_addresses, fetch, is_internal

pytestmark = pytest.mark.anyio

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address


@pytest.mark.parametrize(
    ("address", "internal"),
    [
        (V4("127.0.0.1"), True),
        (V4("10.1.2.3"), True),
        (V4("169.254.169.254"), True),  # cloud metadata
        (V4("100.64.0.1"), True),  # carrier-grade NAT
        (V4("0.0.0.0"), True),
        (V6("::1"), True),
        (V6("fe80::1"), True),
        (V6("fd00::1"), True),
        (V6("::ffff:127.0.0.1"), True),  # IPv4-mapped loopback
        (V4("93.184.215.14"), False),
        (V6("2606:2800:21f:cb07:6820:80da:af6b:8b2c"), False),
        (V6("::ffff:93.184.215.14"), False),
        # IPv6 forms that carry an internal IPv4 address, which NAT64, SIIT or 6to4 may
        # deliver to it; Python's is_global calls each of them global.
        (V6("::127.0.0.1"), True),  # IPv4-compatible (::/96)
        (V6("::ffff:0:127.0.0.1"), True),  # SIIT's IPv4-translated (::ffff:0:0:0/96)
        (V6("64:ff9b::127.0.0.1"), True),  # NAT64's well-known prefix
        (V6("64:ff9b::169.254.169.254"), True),  # ... to the cloud's metadata
        (V6("2002:7f00:1::"), True),  # 6to4 of 127.0.0.1
        (V6("2002:a9fe:a9fe::1"), True),  # 6to4 of 169.254.169.254
        (V6("fec0::1"), True),  # site-local
        (V6("64:ff9b:1::a00:1"), True),  # local-use NAT64
        # The same forms carrying a public address stay external: on a DNS64 network
        # every IPv4-only host resolves to 64:ff9b::/96.
        (V6("64:ff9b::93.184.215.14"), False),
        (V6("2002:5db8:d70e::1"), False),
    ],
)
def test_only_global_addresses_are_external(address: IPAddress, internal: bool) -> None:
    assert is_internal(address) is internal


def test_every_resolved_address_must_be_global() -> None:
    check_addresses("a.example", [V4("93.184.215.14")], allow_private=False)
    with pytest.raises(TranscribeError) as refused:
        check_addresses("a.example", [V4("93.184.215.14"), V4("127.0.0.1")], allow_private=False)
    assert (refused.value.status, refused.value.reason) == (400, "private_address")
    assert "a.example resolves to 127.0.0.1" in refused.value.message
    check_addresses("a.example", [V4("127.0.0.1")], allow_private=True)


class Resolver:
    """Stands in for DNS: a fixed answer per name, and every question asked."""

    def __init__(self, answers: dict[str, list[IPAddress]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        return self.answers[host]


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Resolver:
    resolver = Resolver({})
    monkeypatch.setattr(fetch_module, "resolve", resolver)
    return resolver


async def test_the_request_goes_to_the_checked_ip_with_the_name_as_host_and_sni(
    dns: Resolver,
) -> None:
    dns.answers["audio.example"] = [V6("2606:2800:21f:cb07:6820:80da:af6b:8b2c")]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"RIFF")

    transport = PinnedTransport(allow_private=False, inner=httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:
        response = await client.get("https://audio.example/a.wav")
    assert response.content == b"RIFF"
    [request] = seen
    assert str(request.url) == "https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/a.wav"
    assert request.headers["host"] == "audio.example"
    assert request.extensions["sni_hostname"] == "audio.example"
    assert dns.asked == ["audio.example"]  # once: nothing else resolves the name again


async def test_a_name_resolving_to_an_internal_address_is_never_connected_to(
    dns: Resolver,
) -> None:
    dns.answers["rebind.example"] = [V4("93.184.215.14"), V4("127.0.0.1")]

    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError("connected")

    transport = PinnedTransport(allow_private=False, inner=httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(TranscribeError, match="internal address"):
            await client.get("http://rebind.example/a.wav")


class _HostRecorder(http.server.BaseHTTPRequestHandler):
    hosts: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hosts.append(self.headers.get("Host", ""))
        if self.path == "/hop":  # a redirect to another name: resolved, checked, pinned
            port = self.headers.get("Host", "").rpartition(":")[2]
            self.send_response(302)
            self.send_header("Location", f"http://other.example:{port}/")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"RIFF")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def host_recorder() -> Iterator[int]:
    _HostRecorder.hosts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostRecorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


async def test_localhost_is_refused_and_when_allowed_fetched_with_its_host_header(
    host_recorder: int,
) -> None:
    url = f"http://localhost:{host_recorder}/a.wav"
    with pytest.raises(TranscribeError) as refused:
        await fetch(url, max_bytes=100, timeout_s=5, allow_private=False)
    assert refused.value.reason == "private_address"
    assert "localhost resolves to" in refused.value.message
    assert _HostRecorder.hosts == []
    assert await fetch(url, max_bytes=100, timeout_s=5, allow_private=True) == b"RIFF"
    assert _HostRecorder.hosts == [f"localhost:{host_recorder}"]


async def test_a_name_only_our_resolver_knows_is_reached_at_the_pinned_address(
    host_recorder: int, dns: Resolver
) -> None:
    # httpx could not resolve these names itself: the answer proves it connected to the IP.
    dns.answers["audio.example"] = [V4("127.0.0.1")]
    dns.answers["other.example"] = [V6("::1"), V4("127.0.0.1")]  # ::1: nothing listens
    url = f"http://audio.example:{host_recorder}/hop"
    assert await fetch(url, max_bytes=100, timeout_s=5, allow_private=True) == b"RIFF"
    assert _HostRecorder.hosts == [
        f"audio.example:{host_recorder}",
        f"other.example:{host_recorder}",
    ]
    assert dns.asked == ["audio.example", "other.example"]  # each hop once


async def test_a_redirect_to_an_internal_address_is_refused(
    dns: Resolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    dns.answers["audio.example"] = [V4("93.184.215.14")]
    dns.answers["other.example"] = [V4("127.0.0.1")]
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "http://other.example/"})

    def pinned(allow_private: bool) -> PinnedTransport:
        return PinnedTransport(allow_private, inner=httpx.MockTransport(handler))

    monkeypatch.setattr(fetch_module, "PinnedTransport", pinned)
    with pytest.raises(TranscribeError) as refused:
        await fetch("http://audio.example/", max_bytes=100, timeout_s=5, allow_private=False)
    assert refused.value.reason == "private_address"
    assert "other.example resolves to 127.0.0.1" in refused.value.message
    assert seen == ["http://93.184.215.14/"]  # the first hop only


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://a.example/x", "http://", "http://[::1/", "http://a:b/"]
)
async def test_urls_that_are_not_http_are_refused_before_any_lookup(
    url: str, dns: Resolver
) -> None:
    with pytest.raises(TranscribeError) as refused:
        await fetch(url, max_bytes=100, timeout_s=5, allow_private=True)
    assert (refused.value.status, refused.value.reason) == (400, "bad_url")
    assert dns.asked == []
