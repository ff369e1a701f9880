"""Access control: API keys, an origin allow-list, and a per-client-address session cap.

Checked in the WebSocket handshake, before the connection is accepted and before any worker
resource is touched. A missing or wrong key is refused with HTTP 401, a foreign origin with
HTTP 403, both with a JSON body that says why; the cap is checked after the accept so that
the client reads our error frame, and closes with 1008.

Sans-I/O: ``check_handshake`` takes the handshake's headers and query string and returns a
``Refusal`` or ``None``; the app turns a refusal into a response.
"""

from __future__ import annotations

import hmac
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs

from gateway.limits.admission import Place
from gateway.settings import AccessSettings
from shared.errors import ProtocolError

TOKEN_QUERY_PARAMETER = "token"  # browsers cannot set headers on a WebSocket handshake


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int  # HTTP status of the handshake's answer
    message: str


def check_handshake(
    settings: AccessSettings, headers: Mapping[str, str], query_string: bytes
) -> Refusal | None:
    """Whether a handshake may proceed. ``headers`` has lower-case names."""
    if settings.allowed_origins:
        origin = headers.get("origin")
        # Only browsers send Origin; the list guards against other sites' pages using a
        # visitor's browser (and cookies, or a token in the page) to reach us.
        if origin is not None and origin.rstrip("/").lower() not in settings.allowed_origins:
            return Refusal(403, f"origin {origin!r} is not allowed (ASR_ALLOWED_ORIGINS)")
    return check_key(settings, headers, query_string)


def check_status_access(
    settings: AccessSettings, headers: Mapping[str, str], query_string: bytes
) -> Refusal | None:
    """Whether a request may read the operator's status (``/metrics``, ``/readyz`` details)."""
    if not settings.protect_status:
        return None
    return check_key(settings, headers, query_string)


def check_key(
    settings: AccessSettings, headers: Mapping[str, str], query_string: bytes
) -> Refusal | None:
    """A refusal unless the request presents one of the keys (none needed without keys)."""
    if not settings.api_keys:
        return None
    key = presented_key(headers, query_string)
    if key is None:
        return Refusal(
            401,
            "an API key is required: send 'Authorization: Bearer KEY'"
            f" or the query parameter ?{TOKEN_QUERY_PARAMETER}=KEY",
        )
    # Compare against every key, in constant time per key: no early exit on a match.
    matches = [hmac.compare_digest(key.encode(), k.encode()) for k in settings.api_keys]
    if not any(matches):
        return Refusal(401, "the API key is not valid")
    return None


def presented_key(headers: Mapping[str, str], query_string: bytes) -> str | None:
    authorization = headers.get("authorization")
    if authorization is not None:
        scheme, _, credentials = authorization.partition(" ")
        # Bearer: ours and OpenAI's; Token: Deepgram's (its SDKs and clients send it).
        if scheme.lower() in ("bearer", "token") and credentials.strip():
            return credentials.strip()
    tokens = parse_qs(query_string.decode("latin-1")).get(TOKEN_QUERY_PARAMETER)
    return tokens[0] if tokens else None


class ClientSessions:
    """Live sessions per client address, for ``max_sessions_per_client``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._live: Counter[str] = Counter()

    def admit(self, address: str) -> Place:
        """Count one more session from ``address``, or raise ProtocolError (1008)."""
        if self.cap and self._live[address] >= self.cap:
            raise ProtocolError(
                f"too many sessions from {address}: at most {self.cap} at once"
                " (ASR_MAX_SESSIONS_PER_CLIENT)"
            )
        self._live[address] += 1
        return Place(lambda: self._release(address))

    def live(self, address: str) -> int:
        return self._live[address]

    def _release(self, address: str) -> None:
        self._live[address] -= 1
        if self._live[address] <= 0:
            del self._live[address]  # the counter must not grow with every address seen
