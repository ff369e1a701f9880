"""The URL fetch of ``POST /v1/transcribe``: http(s) only, bounded, pinned to a checked address.

Each hop (the URL, then every redirect) is resolved once; unless private addresses are
allowed, every address it resolves to must be global; then the connection goes to that
exact address (``PinnedTransport``): the request URL's host becomes the IP, the ``Host``
header keeps the name, and for https the name is the TLS SNI and the name the certificate is
checked against. So a DNS answer that changes between the check and the connect (DNS
rebinding) cannot send the fetch elsewhere.

Every failure is a ``TranscribeError``: a refused or failed connection, a protocol error, an
invalid URL, a malformed ``Content-Length``: 400 ``fetch_failed``; the ``ASR_FETCH_TIMEOUT``
passed: 400 ``fetch_timeout``; an internal address: 400 ``private_address``; more than
``max_bytes``: 413 ``too_large``; no descriptor for the connection (the process's table is
full, EMFILE/ENFILE, or the kernel is out of buffers): 503 ``unavailable``, to retry.

What a fetch needs besides its socket is made once, at import: httpx's lazily imported
``httpcore`` and the TLS context (which reads the CA bundle), so that a fetch on a nearly
full descriptor table fails as the server's fault, not as a traceback, and costs one read
of the CA bundle per process rather than per request.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import ssl
from urllib.parse import urlsplit

import anyio
import httpcore  # noqa: F401  (httpx imports it at the first request; see above)
import httpx

from gateway.files.errors import TranscribeError, too_large

REDIRECTS = 3
# The process (or system) is out of descriptors or buffers: the server's state, not the URL.
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
TLS_CONTEXT: ssl.SSLContext = httpx.create_ssl_context()

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


async def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to, in the resolver's order, each once."""
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        if _out_of_resources(exc):
            raise _unavailable() from None
        raise TranscribeError(400, "fetch_failed", f"cannot resolve {host}: {exc}") from None
    addresses: dict[IPAddress, None] = {}
    for info in infos:
        # The scope of a link-local IPv6 address ("fe80::1%eth0") is not an address.
        addresses[ipaddress.ip_address(str(info[4][0]).partition("%")[0])] = None
    return list(addresses)


# IPv6 forms that carry an IPv4 address in their last 32 bits, which a translating network
# (NAT64, SIIT, the deprecated IPv4-compatible form) delivers to that IPv4 address:
# 64:ff9b::7f00:1 may reach 127.0.0.1 there, and Python's is_global calls it global.
_CARRY_IPV4_IN_LOW_32 = tuple(
    ipaddress.IPv6Network(prefix) for prefix in ("::/96", "::ffff:0:0:0/96", "64:ff9b::/96")
)
# Never public, though is_global says so: site-local (deprecated, still routed inside some
# sites), and the local-use NAT64 prefix, whose IPv4 may sit anywhere in the address.
_NEVER_PUBLIC_V6 = tuple(
    ipaddress.IPv6Network(prefix) for prefix in ("fec0::/10", "64:ff9b:1::/48")
)


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and may be delivered to, if any: mapped
    (``::ffff:a.b.c.d``), 6to4 (``2002:AABB:CCDD::``), or in its low 32 bits."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _CARRY_IPV4_IN_LOW_32):
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def is_internal(address: IPAddress) -> bool:
    """Whether ``address`` may reach this host, its network or its cloud's metadata: not
    global, or an IPv6 form that carries such an IPv4 address, or one never public."""
    if isinstance(address, ipaddress.IPv6Address):
        if any(address in network for network in _NEVER_PUBLIC_V6):
            return True
        carried = embedded_ipv4(address)
        if carried is not None:
            return not carried.is_global
    return not address.is_global


def check_addresses(host: str, addresses: list[IPAddress], allow_private: bool) -> None:
    if not addresses:
        raise TranscribeError(400, "fetch_failed", f"{host} resolves to no address")
    if allow_private:
        return
    internal = next((address for address in addresses if is_internal(address)), None)
    if internal is not None:
        raise TranscribeError(
            400,
            "private_address",
            f"{host} resolves to {internal}, an internal address; such URLs are not fetched"
            " (ASR_FETCH_ALLOW_PRIVATE)",
        )


class PinnedTransport(httpx.AsyncBaseTransport):
    """Resolves each request's host once, checks the addresses, and connects to them
    (in order, the next on a failed connect); ``inner`` makes the connections."""

    def __init__(self, allow_private: bool, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self._allow_private = allow_private
        self._inner = inner if inner is not None else httpx.AsyncHTTPTransport(verify=TLS_CONTEXT)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses = await resolve(host, port)
        check_addresses(host, addresses, self._allow_private)
        extensions = dict(request.extensions)
        if url.scheme == "https":
            extensions["sni_hostname"] = host  # SNI and certificate checks use the name
        failure: httpx.ConnectError | None = None
        for address in addresses:
            pinned = httpx.Request(
                request.method,
                url.copy_with(host=str(address)),
                headers=request.headers,  # with Host: the name, as httpx set it
                stream=request.stream,
                extensions=extensions,
            )
            try:
                return await self._inner.handle_async_request(pinned)
            except httpx.ConnectError as error:
                failure = error  # nothing was sent: the next address may answer
        assert failure is not None
        raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()


def check_url(url: str) -> None:
    """Only http and https URLs with a host are fetched."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError when the port is not a number
    except ValueError:
        raise TranscribeError(400, "bad_url", f"the URL {url!r:.200} is malformed") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TranscribeError(
            400, "bad_url", f"only http and https URLs are fetched, not {url!r:.200}"
        )


async def fetch(
    url: str,
    *,
    max_bytes: int,
    timeout_s: float,
    allow_private: bool,
) -> bytes:
    """GET ``url``, at most ``max_bytes``, within ``timeout_s`` (the whole fetch, redirects
    included), at most ``REDIRECTS`` redirects, each hop checked and pinned."""
    try:
        with anyio.fail_after(timeout_s):
            return await _fetch(url, max_bytes, PinnedTransport(allow_private))
    except (TimeoutError, httpx.TimeoutException):
        raise TranscribeError(
            400, "fetch_timeout", f"fetching the URL took over {timeout_s:g} s (ASR_FETCH_TIMEOUT)"
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as error:
        if _out_of_resources(error):
            raise _unavailable() from None
        if isinstance(error, OSError):
            raise
        raise TranscribeError(
            400, "fetch_failed", f"fetching the URL failed: {type(error).__name__}: {error}"
        ) from None


def _unavailable() -> TranscribeError:
    return TranscribeError(
        503, "unavailable", "the server has no free descriptor for the fetch now; retry shortly"
    )


def _out_of_resources(error: BaseException) -> bool:
    """Whether an error, or one it was raised from (httpx wraps the socket's), says the
    process has no descriptor or buffer left."""
    seen: BaseException | None = error
    for _ in range(8):  # a chain of causes is short; a cycle must not loop for ever
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in OUT_OF_RESOURCES:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def _fetch(url: str, max_bytes: int, transport: httpx.AsyncBaseTransport) -> bytes:
    # No decompression (identity, raw bytes): a small gzip body must not inflate past the cap
    # in one chunk. The timeout is fail_after's, around the whole fetch.
    async with httpx.AsyncClient(
        transport=transport, follow_redirects=False, trust_env=False, timeout=None
    ) as client:
        for _ in range(REDIRECTS + 1):
            check_url(url)
            headers = {"Accept-Encoding": "identity"}
            async with client.stream("GET", url, headers=headers) as response:
                if response.is_redirect:
                    url = str(response.url.join(response.headers.get("location", "")))
                    continue
                if response.status_code != 200:
                    raise TranscribeError(
                        400, "fetch_failed", f"fetching the URL gave HTTP {response.status_code}"
                    )
                declared = response.headers.get("content-length")
                if declared is not None:
                    if not (declared.isascii() and declared.strip().isdigit()):
                        raise TranscribeError(
                            400,
                            "fetch_failed",
                            f"the URL's server sent a malformed Content-Length {declared!r:.40}",
                        )
                    if int(declared) > max_bytes:
                        raise too_large(max_bytes)
                body = bytearray()
                async for piece in response.aiter_raw():
                    body += piece
                    if len(body) > max_bytes:
                        raise too_large(max_bytes)
                return bytes(body)
    raise TranscribeError(400, "fetch_failed", f"more than {REDIRECTS} redirects")
