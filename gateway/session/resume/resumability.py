"""A resumable session's side of its resumes (``gateway.session.resume.resumes`` holds the
replica's side): its name and tokens, who may resume it and how often, the resume waiting
to be served, and its wait while parked.

Parked: a dropped connection ends only the connection's task group; the forwarder, the
writer and the pool streams go on until a resume hands the session its next connection (or
the window passes), whose sender starts again after the last result the client has. The
reader takes a frame only when its events have room, and queues them without waiting:
whatever the parser took, the session has, the acks (``samples``) count exactly that, and a
lost connection's reader never waits on the forwarder.

Tokens: the current generation is the only one a resume may use, with one exception, so
that a client whose resume's answer (the session frame with the next token) was lost with
its connection is not stranded: the generation before still works **once** while the
client cannot have read the current token: the connection it went out on has brought no
frame since (a resuming client reads it before it sends anything), and the resume asks for
no result after the newest when it went out. Anything else is a replay. The exception is
spent by its use and comes back only with the next generation, so an old token from a log
works at most once, however long the client then stays quiet.

Each resume replays the results the client has not acknowledged (up to the outbox's
bound), for a few hundred bytes of handshake: ``ASR_MAX_RESUMES_PER_MINUTE`` bounds how
often one session can make us do that (``ResumeThrottledError``, 4429, uses nothing up).
"""

from __future__ import annotations

import hmac
import logging
from typing import Literal

import anyio
from starlette.websockets import WebSocket

from gateway.funasr.results import session_message
from gateway.limits.rate import TokenBucket
from gateway.metrics import GatewayMetrics
from gateway.session.resume.resumes import Attachment, ResumableSessions
from gateway.session.resume.token import TokenClaim
from shared.errors import (
    ResumeDisplacedError,
    ResumeExpiredError,
    ResumeForbiddenError,
    ResumeReusedError,
    ResumeThrottledError,
)

logger = logging.getLogger(__name__)

RESUME_BURST = 5  # resumes a session may take back to back before the rate applies
NoResume = Literal["window passed", "no parking place"]


class Resumability:
    """Registered with ``sessions`` under a new id on creation; ``forget`` ends it."""

    def __init__(
        self,
        sessions: ResumableSessions,
        session_id: str,
        *,
        owner: str,
        client: str,
        resumes_per_minute: float,
        now: float,
    ) -> None:
        self.session_id = session_id
        self._sessions = sessions
        self._owner = owner  # gateway.session.resume.resumes.owner_of
        self._client = client  # its first connection's address: whose parking share it uses
        self._generation = 1  # the current token's
        self._issued_at = 0  # the newest result when the current token first went out
        self._heard_since = False  # a frame came in after the current token went out
        self._unissued = True  # the current generation has not gone out in a session frame
        self._previous_spent = False  # the one use of the previous token was made
        self._rate = TokenBucket(resumes_per_minute / 60, RESUME_BURST, now)
        self._pending: Attachment | None = None
        self._arrived = anyio.Event()

    # -- tokens ---------------------------------------------------------------------------

    def heard(self) -> None:
        """A frame came in on the current connection: its client has read the current token."""
        self._heard_since = True

    def session_frame(
        self, *, resumed: bool, utterance: int, samples: int, input_ended: bool, newest_result: int
    ) -> str:
        """The session frame of a connection about to be served, with the current token;
        the exception's clock starts when a generation first goes out, and only then."""
        if self._unissued:
            self._unissued = False
            self._issued_at = newest_result
            self._heard_since = False
        sessions = self._sessions
        return session_message(
            session_id=self.session_id,
            replica=sessions.signer.replica,
            resume_token=sessions.signer.issue(self.session_id, self._generation),
            window_s=sessions.window_s,
            resumed=resumed,
            utterance=utterance,
            samples=samples,
            input_ended=input_ended,
            last_result=newest_result,
        )

    def claim(self, claim: TokenClaim, last_result: int, owner: str, now: float) -> None:
        """Check a resume's token and rate; on success the current token's generation is
        the next one (or, for the previous token's one use, stays as it is). Raises the
        ``ResumeError`` that says why not, using nothing up."""
        if not hmac.compare_digest(owner, self._owner):
            raise ResumeForbiddenError("the session was opened with another API key")
        current = claim.generation == self._generation
        if not (current or self._may_reuse_previous(claim.generation, last_result)):
            raise ResumeReusedError(
                "the resume token was used already: each resume returns the next one"
            )
        if not self._rate.take(1.0, now):
            wait = (1.0 - self._rate.tokens) / self._rate.rate
            raise ResumeThrottledError(
                f"the session was resumed too often (ASR_MAX_RESUMES_PER_MINUTE): retry in"
                f" {wait:.1f} s"
            )
        if current:
            self._generation += 1
            self._unissued = True
            self._previous_spent = False
        else:
            self._previous_spent = True  # it gets the same next token, once

    def _may_reuse_previous(self, generation: int, last_result: int) -> bool:
        if generation != self._generation - 1 or self._previous_spent:
            return False
        if self._unissued:
            return True  # the current token never went out: the client cannot have it
        return not self._heard_since and last_result <= self._issued_at

    # -- the next connection ----------------------------------------------------------------

    @property
    def waiting(self) -> bool:
        """A resume is waiting to be served."""
        return self._pending is not None

    def hand_over(self, websocket: WebSocket, last_result: int) -> Attachment:
        """A claimed resume's connection, served next: one still waiting is displaced."""
        attachment = Attachment(websocket, last_result)
        if self._pending is not None:
            self._pending.refuse(ResumeDisplacedError("a later resume took the session over"))
        self._pending = attachment
        self._arrived.set()
        return attachment

    async def next_connection(self, metrics: GatewayMetrics) -> Attachment | None:
        """The resume waiting already, else the first within the window, parked meanwhile
        (counted as parked); None when none comes, or no parking place is free."""
        with metrics.sessions_parked.track_inprogress():
            attachment = await self._wait_for_resume()
        if attachment == "no parking place":
            metrics.parking_refused.inc()
            logger.info(
                "a resumable session ended at its drop: ASR_MAX_PARKED_SESSIONS are parked,"
                " or ASR_MAX_PARKED_PER_CLIENT of its client"
            )
        if not isinstance(attachment, Attachment):
            return None
        metrics.resumes.labels("resumed").inc()  # served: a later one did not displace it
        return attachment

    async def _wait_for_resume(self) -> Attachment | NoResume:
        if self._pending is None:
            if not self._sessions.try_park(self._client):
                return "no parking place"
            try:
                with anyio.move_on_after(self._sessions.window_s):
                    await self._arrived.wait()
            finally:
                self._sessions.unpark(self._client)
        attachment, self._pending = self._pending, None
        if attachment is None:
            return "window passed"
        self._arrived = anyio.Event()
        return attachment

    def forget(self) -> None:
        """No resume reaches the session from now on; one waiting is refused."""
        self._sessions.forget(self.session_id)
        if self._pending is not None:
            self._pending.refuse(ResumeExpiredError("the session ended"))
            self._pending = None
