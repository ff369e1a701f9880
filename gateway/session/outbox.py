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

Both bounds are of the memory the frames really hold: each is kept as its UTF-8 bytes (a
``str`` with one character outside Latin-1 costs 2 or 4 bytes for every character of it)
and counted with its object and queue entry overheads, so that a resumable session's
outbox holds at most ``RESUME_BYTES`` however its results and names are spelled.
"""

from __future__ import annotations

import sys
from collections import deque

import anyio

from gateway.funasr.results import numbered
from shared.errors import ResultsGoneError

UNSENT_BYTES = 64 * 1024  # a non-resumable session: at most this waits on its connection
RESUME_BYTES = 256 * 1024  # a resumable one: UNSENT_BYTES of it unsent, the rest kept after
# sending, for a resume: what a connection that drops can have taken without delivering it
# (uvicorn's 64 KiB write buffer and the kernel's send buffer) is lost with it.
ALIGNMENT = 16  # CPython's allocator hands out memory in multiples of this


def _allocated(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


# A frame's queue entry besides its bytes object: the (number, data) tuple, the number's
# int, the deque's slot, and a share of the deque's blocks and the allocator's pools (16:
# measured, tracemalloc counted up to 2 % more than the rest).
ENTRY_BYTES = _allocated(sys.getsizeof((0, b""))) + _allocated(sys.getsizeof(2**40)) + 8 + 16


def held_bytes(data: bytes) -> int:
    """The memory one queued frame holds, as the allocator counts it."""
    return _allocated(sys.getsizeof(data)) + ENTRY_BYTES


class Outbox:
    def __init__(self, *, unsent_bytes: int = UNSENT_BYTES, retain_bytes: int = 0) -> None:
        self.unsent_bytes = unsent_bytes
        self.retain_bytes = retain_bytes
        self.numbering = False  # from the moment the session became resumable
        self._first_numbered = 1  # frames before it had no number: a client has "all" of them
        self._frames: deque[tuple[int, bytes]] = deque()  # (number, UTF-8), oldest first
        self._newest = 0  # the last number given
        self._sent = 0  # frames up to this number were handed to the current connection
        self._unsent_size = 0
        self._retained_size = 0  # of the frames up to _sent still kept
        self._changed = anyio.Event()

    @property
    def newest(self) -> int:
        """The number of the last frame put in (0: none yet)."""
        return self._newest

    def number_from_now(self, retain_bytes: int = RESUME_BYTES - UNSENT_BYTES) -> None:
        """The session became resumable: number every frame from here on, keep sent ones."""
        self.numbering = True
        self._first_numbered = self._newest + 1
        self.unsent_bytes = max(self.unsent_bytes, RESUME_BYTES - retain_bytes)
        self.retain_bytes = retain_bytes

    async def put(self, text: str) -> None:
        """Add a frame; wait first while the unsent frames fill the bound (one frame is
        always let in, however large, so that nothing can wait forever on its own size)."""
        while True:
            number = self._newest + 1
            data = (numbered(text, number) if self.numbering else text).encode("utf-8")
            size = held_bytes(data)
            if not self._unsent_size or self._unsent_size + size <= self.unsent_bytes:
                break
            await self.changed()
        self._newest = number
        self._frames.append((number, data))
        self._unsent_size += size
        self._notify()

    def next_unsent(self) -> tuple[int, str] | None:
        """The first frame the current connection has not been handed, if any."""
        for number, data in self._frames:
            if number > self._sent:
                return number, data.decode("utf-8")
        return None

    def sent(self, number: int) -> None:
        """The current connection has been handed every frame up to ``number``."""
        for frame_number, data in self._frames:
            if self._sent < frame_number <= number:
                self._unsent_size -= held_bytes(data)
                self._retained_size += held_bytes(data)
        self._sent = max(self._sent, number)
        # Kept for a resume only while the session numbers its frames, within the bound.
        while self._frames and self._frames[0][0] <= self._sent:
            if self.numbering and self._retained_size <= self.retain_bytes:
                break
            self._retained_size -= held_bytes(self._frames.popleft()[1])
        self._notify()

    def unsent(self) -> list[str]:
        """Every frame not yet handed to the current connection: what a closing session
        sends before its error frame."""
        return [data.decode("utf-8") for number, data in self._frames if number > self._sent]

    @property
    def held(self) -> int:
        """The memory the queued frames hold, in bytes."""
        return self._unsent_size + self._retained_size

    def check_resume(self, last_result: int) -> None:
        """Raise ``ResultsGoneError`` unless every frame after ``last_result`` is held."""
        last_result = max(last_result, self._first_numbered - 1)
        # The messages name only what the client sent: a token's holder learns nothing of
        # the session's results from a refusal.
        if last_result > self._newest:
            raise ResultsGoneError(f"last_result {last_result} was never issued")
        oldest = self._frames[0][0] if self._frames else self._newest + 1
        if last_result < oldest - 1:
            raise ResultsGoneError(f"the results after {last_result} are no longer held")

    def rewind(self, last_result: int) -> None:
        """A new connection whose client has every frame up to ``last_result``: drop those,
        and hand it the rest again from the first after."""
        self.check_resume(last_result)
        last_result = max(last_result, self._first_numbered - 1)
        while self._frames and self._frames[0][0] <= last_result:
            number, data = self._frames.popleft()
            if number > self._sent:
                self._unsent_size -= held_bytes(data)
            else:
                self._retained_size -= held_bytes(data)
        # The frames after last_result count as unsent again.
        for number, data in self._frames:
            if number <= self._sent:
                self._retained_size -= held_bytes(data)
                self._unsent_size += held_bytes(data)
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
