"""Resumable sessions (opt-in, ours): the sessions a resume can reach, and how many are
parked.

A session whose config says ``"resumable": true`` is registered here under a random id and
gets a token (``gateway.session.resume.token``). When its connection drops, the session parks: its
task group goes on (the forwarder, the writer and the pool streams never notice), it keeps
its admission place and the audio it holds, and it waits ``ASR_RESUME_WINDOW`` seconds for
a connection that presents its token. At most ``ASR_MAX_PARKED_SESSIONS`` wait at once, and
at most ``ASR_MAX_PARKED_PER_CLIENT`` of one client address, so that one client cannot take
every place and end everybody else's sessions at their next drop; a drop past either ends
the session as if its client had left. The session's own side (its tokens, how often it
may be resumed) is ``gateway.session.resume.resumability``.

The resume's handshake is checked as a new session's (keys, origin), takes no place of its
own (the session has one) and is not refused while draining: it comes for results owed.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import parse_qs

import anyio
from starlette.websockets import WebSocket

from gateway.limits.access import presented_key
from gateway.session.resume.token import TokenClaim, TokenSigner, new_session_id
from gateway.settings import AccessSettings
from shared.errors import ProtocolError, ResumeError, ResumeExpiredError

RESUME_QUERY_PARAMETER = "resume"
LAST_RESULT_QUERY_PARAMETER = "last_result"


@dataclass(eq=False)
class Attachment:
    """A resuming connection handed to its session. The session serves ``websocket`` until
    it is gone, then sets ``released``; ``refusal``: the session could not take it after
    all, and the endpoint closes it with that error."""

    websocket: WebSocket
    last_result: int
    released: anyio.Event = field(default_factory=anyio.Event)
    refusal: ResumeError | None = None

    def refuse(self, error: ResumeError) -> None:
        self.refusal = error
        self.released.set()


class Resumable(Protocol):
    def attach(
        self, websocket: WebSocket, claim: TokenClaim, last_result: int, owner: str
    ) -> Attachment:
        """Take a resuming connection, or raise the ``ResumeError`` that says why not."""
        ...


class ResumableSessions:
    """This replica's resumable sessions, by id."""

    def __init__(
        self, replica: str, window_s: float, max_parked: int, max_parked_per_client: int = 0
    ) -> None:
        self.signer = TokenSigner(replica)
        self.window_s = window_s
        self.max_parked = max_parked
        self.max_parked_per_client = max_parked_per_client  # 0: no share of its own
        self.parked = 0
        self._parked_by_client: Counter[str] = Counter()
        self._sessions: dict[str, Resumable] = {}

    def register(self, session: Resumable) -> str:
        session_id = new_session_id()
        self._sessions[session_id] = session
        return session_id

    def forget(self, session_id: str) -> None:
        """The session ended: its tokens are expired from now on."""
        self._sessions.pop(session_id, None)

    def find(self, token: str) -> tuple[Resumable, TokenClaim]:
        """The session a token names; raises the ``ResumeError`` that says why not."""
        claim = self.signer.read(token)
        session = self._sessions.get(claim.session_id)
        if session is None:
            raise ResumeExpiredError(
                "the session is no longer held: its resume window passed, or it ended"
            )
        return session, claim

    def try_park(self, client: str) -> bool:
        """Take one of the parking places for a session of ``client``; False when all
        ``max_parked`` are taken, or ``client`` has its share."""
        share = self.max_parked_per_client
        if self.parked >= self.max_parked or (share and self._parked_by_client[client] >= share):
            return False
        self.parked += 1
        self._parked_by_client[client] += 1
        return True

    def unpark(self, client: str) -> None:
        self.parked -= 1
        self._parked_by_client[client] -= 1
        if self._parked_by_client[client] <= 0:
            del self._parked_by_client[client]  # not a counter of every address seen


def owner_of(access: AccessSettings, headers: Mapping[str, str], query_string: bytes) -> str:
    """Who opened a session, for binding its tokens: a digest of the API key it presented
    (keys are checked before this), or "" when no key is needed: anyone with the token."""
    if not access.api_keys:
        return ""
    key = presented_key(headers, query_string) or ""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ResumeQuery:
    token: str
    last_result: int


def resume_query(query_string: bytes) -> ResumeQuery | None:
    """``?resume=TOKEN&last_result=K`` from a handshake's query, if it asks to resume."""
    query = parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
    tokens = query.get(RESUME_QUERY_PARAMETER)
    if not tokens:
        return None
    raw = query.get(LAST_RESULT_QUERY_PARAMETER, ["0"])[0]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 15):
        raise ProtocolError(
            f"{LAST_RESULT_QUERY_PARAMETER} must be a whole number, got {raw!r:.40}"
        )
    return ResumeQuery(tokens[0], int(raw))
