"""Resume tokens, sans I/O: ``<replica>.<session id>.<generation>.<mac>``.

The replica comes first, in the clear, so that a proxy can route a resume back to the
replica holding the session (``url_param(resume)``'s first field) and a replica that gets
someone else's token can say where it belongs. The MAC is HMAC-SHA256 over the rest under a
key drawn at start-up: 256 bits nobody outside the process knows, so a token cannot be
guessed or forged, and one from before a restart (whose sessions are gone) is refused as
not ours. The generation makes a token single-use: every resume hands out the next one, and
the session takes only its current generation.

Nothing is stored per token: an expired session is recognised by a valid MAC whose session
is no longer held (``ResumeExpiredError``), a used token by a valid MAC with an old
generation (``ResumeReusedError``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from shared.errors import ResumeError, ResumeMisdirectedError

MAX_TOKEN_CHARS = 256  # what the parser takes; ours are about 110
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{16}")
_GENERATION = re.compile(r"[1-9][0-9]{0,8}")
_MAC = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes of base64url, unpadded


def new_session_id() -> str:
    """96 random bits; not a secret (it appears in logs), only a name."""
    return secrets.token_urlsafe(12)


@dataclass(frozen=True, slots=True)
class TokenClaim:
    """What a genuine token of this replica says: which session, which generation."""

    session_id: str
    generation: int


class TokenSigner:
    """Issues and checks this replica's tokens."""

    def __init__(self, replica: str, key: bytes | None = None) -> None:
        self.replica = replica
        self._key = secrets.token_bytes(32) if key is None else key

    def issue(self, session_id: str, generation: int) -> str:
        body = f"{self.replica}.{session_id}.{generation}"
        return f"{body}.{self._mac(body)}"

    def read(self, token: str) -> TokenClaim:
        """The claim of a token this replica issued; ``ResumeMisdirectedError`` for
        another replica's, ``ResumeError`` for anything else."""
        parts = token.split(".")
        if len(parts) != 4 or len(token) > MAX_TOKEN_CHARS:
            raise ResumeError("the resume token is malformed")
        replica, session_id, generation, mac = parts
        if replica != self.replica:
            raise ResumeMisdirectedError(
                f"the session is held by replica {replica!r}, not {self.replica!r}:"
                " resume through the proxy that routes by the token, or at that replica",
                replica,
            )
        if not (
            _SESSION_ID.fullmatch(session_id)
            and _GENERATION.fullmatch(generation)
            and _MAC.fullmatch(mac)
        ):
            raise ResumeError("the resume token is malformed")
        body = f"{replica}.{session_id}.{generation}"
        if not hmac.compare_digest(mac, self._mac(body)):
            raise ResumeError("the resume token is not one this server issued")
        return TokenClaim(session_id, int(generation))

    def _mac(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode("ascii"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
