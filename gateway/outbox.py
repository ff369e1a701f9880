"""The frames a session owes its client, in order: the writer puts them in, the current
connection's sender takes them out.

Between the two the outbox bounds what waits unsent (``unsent_bytes``): a writer that runs
ahead of a slow connection, or of no connection at all while a resumable session is parked,
waits in ``put``, which leaves its pool stream's results unread, which makes the forwarder's
``send`` wait: the same backpressure as a direct send, and never more than the bound held.

A resumable session numbers its frames (``result_id``) and keeps those already sent, up to
``retain_bytes``, because a frame handed to a connection that then drops may never have
arrived: a resume says which the client has (``rewind``), and the sender starts again after
it. Frames the client says it has are dropped at once; the oldest sent ones go first when
the bound is passed, and a resume that needs one of those is refused (``ResultsGoneError``).
"""

from __future__ import annotations

from collections import deque

import anyio

from gateway.results import numbered
from shared.errors import ResultsGoneError

UNSENT_BYTES = 64 * 1024  # a non-resumable session: at most this waits on its connection
RESUME_BYTES = 256 * 1024  # a resumable one: unsent, and kept after sending, each


class Outbox:
    def __init__(self, *, unsent_bytes: int = UNSENT_BYTES, retain_bytes: int = 0) -> None:
        self.unsent_bytes = unsent_bytes
        self.retain_bytes = retain_bytes
        self.numbering = False  # from the moment the session became resumable
        self._first_numbered = 1  # frames before it had no number: a client has "all" of them
        self._frames: deque[tuple[int, str]] = deque()  # (number, text), oldest first
        self._newest = 0  # the last number given
        self._sent = 0  # frames up to this number were handed to the current connection
        self._unsent_size = 0
        self._retained_size = 0  # of the frames up to _sent still kept
        self._changed = anyio.Event()

    @property
    def newest(self) -> int:
        """The number of the last frame put in (0: none yet)."""
        return self._newest

    def number_from_now(self, retain_bytes: int = RESUME_BYTES) -> None:
        """The session became resumable: number every frame from here on, keep sent ones."""
        self.numbering = True
        self._first_numbered = self._newest + 1
        self.unsent_bytes = max(self.unsent_bytes, retain_bytes)
        self.retain_bytes = retain_bytes

    async def put(self, text: str) -> None:
        """Add a frame; wait first while the unsent frames fill the bound (one frame is
        always let in, however large, so that nothing can wait forever on its own size)."""
        while self._unsent_size and self._unsent_size + len(text) > self.unsent_bytes:
            await self.changed()
        self._newest += 1
        if self.numbering:
            text = numbered(text, self._newest)
        self._frames.append((self._newest, text))
        self._unsent_size += len(text)
        self._notify()

    def next_unsent(self) -> tuple[int, str] | None:
        """The first frame the current connection has not been handed, if any."""
        for number, text in self._frames:
            if number > self._sent:
                return number, text
        return None

    def sent(self, number: int) -> None:
        """The current connection has been handed every frame up to ``number``."""
        for frame_number, text in self._frames:
            if self._sent < frame_number <= number:
                self._unsent_size -= len(text)
                self._retained_size += len(text)
        self._sent = max(self._sent, number)
        # Kept for a resume only while the session numbers its frames, within the bound.
        while self._frames and self._frames[0][0] <= self._sent:
            if self.numbering and self._retained_size <= self.retain_bytes:
                break
            self._retained_size -= len(self._frames.popleft()[1])
        self._notify()

    def unsent(self) -> list[str]:
        """Every frame not yet handed to the current connection: what a closing session
        sends before its error frame."""
        return [text for number, text in self._frames if number > self._sent]

    def check_resume(self, last_result: int) -> None:
        """Raise ``ResultsGoneError`` unless every frame after ``last_result`` is held."""
        last_result = max(last_result, self._first_numbered - 1)
        if last_result > self._newest:
            raise ResultsGoneError(
                f"last_result {last_result} is beyond the newest result, {self._newest}"
            )
        oldest = self._frames[0][0] if self._frames else self._newest + 1
        if last_result < oldest - 1:
            raise ResultsGoneError(
                f"the results after {last_result} are no longer held (the oldest is {oldest})"
            )

    def rewind(self, last_result: int) -> None:
        """A new connection whose client has every frame up to ``last_result``: drop those,
        and hand it the rest again from the first after."""
        self.check_resume(last_result)
        last_result = max(last_result, self._first_numbered - 1)
        while self._frames and self._frames[0][0] <= last_result:
            number, text = self._frames.popleft()
            if number > self._sent:
                self._unsent_size -= len(text)
            else:
                self._retained_size -= len(text)
        # The frames after last_result count as unsent again.
        for number, text in self._frames:
            if number <= self._sent:
                self._retained_size -= len(text)
                self._unsent_size += len(text)
        self._sent = last_result
        self._notify()

    async def changed(self) -> None:
        """Return at the next change: a frame put in, frames sent, a rewind, ``poke``."""
        await self._changed.wait()

    def poke(self) -> None:
        """Wake whoever waits in ``changed`` (the sender has something else to send)."""
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
