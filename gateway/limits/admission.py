"""Admission: at most ``max_sessions`` sessions at once, a bounded line of sessions waiting
for a place, none while draining, and the drain."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from types import TracebackType

import anyio

from shared.errors import OverCapacityError, ShuttingDownError


class _Waiter:
    """A session waiting in line: ``decided`` is set when it is given ``place``, or refused
    (the drain) with ``place`` still None."""

    __slots__ = ("decided", "place")

    def __init__(self) -> None:
        self.decided = anyio.Event()
        self.place: Place | None = None


class Admission:
    """Counts live sessions and says whether another may start.

    ``admit`` answers at once; ``wait_for_place`` may wait for a place to come free, in
    arrival order, in a line of bounded length. A refused session is told why
    (``OverCapacityError``, close 1013, or ``ShuttingDownError``, close 1012). The drain is
    two one-way events that sessions watch: ``draining`` (refuse new work and every waiter,
    close each session as soon as it is between utterances) and ``expired`` (the drain
    timeout passed: close the rest now).
    """

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        self.active = 0
        # Told to the balancers (/readyz, the agent) before the drain proper, which waits
        # ASR_DRAIN_DELAY for them to stop sending sessions here.
        self.announced = anyio.Event()
        self.draining = anyio.Event()
        self.expired = anyio.Event()
        self._idle: anyio.Event | None = None
        # Oldest first; a place given back goes to the first. Bounded by wait_for_place.
        self._waiters: deque[_Waiter] = deque()

    @property
    def waiting(self) -> int:
        """Sessions waiting for a place."""
        return len(self._waiters)

    def admit(self) -> Place:
        """Take one of the ``max_sessions`` places, or raise why not."""
        if self.draining.is_set():
            raise ShuttingDownError("the server is shutting down; reconnect later")
        if self.active >= self.max_sessions:
            raise OverCapacityError(
                f"the server is serving its maximum of {self.max_sessions} sessions;"
                " try again later"
            )
        self.active += 1
        return Place(self._release)

    async def wait_for_place(self, timeout: float, queue_size: int) -> Place:
        """Take a place, waiting up to ``timeout`` seconds for one to come free if all are
        taken; places go to waiters in the order they came. Refused at once while
        draining, when ``timeout`` is 0, or when ``queue_size`` sessions already wait."""
        if self.draining.is_set() or timeout <= 0 or self.active < self.max_sessions:
            return self.admit()
        if len(self._waiters) >= queue_size:
            raise OverCapacityError(
                f"the server is serving its maximum of {self.max_sessions} sessions and"
                f" {len(self._waiters)} more are waiting for a place; try again later"
            )
        waiter = _Waiter()
        self._waiters.append(waiter)
        try:
            with anyio.move_on_after(timeout):
                await waiter.decided.wait()
        except BaseException:
            self._withdraw(waiter)
            raise
        if waiter.place is not None:  # given one, even if the time ran out meanwhile
            return waiter.place
        self._withdraw(waiter)
        if self.draining.is_set():
            raise ShuttingDownError("the server is shutting down; reconnect later")
        raise OverCapacityError(
            f"the server is serving its maximum of {self.max_sessions} sessions and none"
            f" came free within {timeout:g} s (ASR_ADMISSION_WAIT); try again later"
        )

    def admit_more(self, count: int) -> Place:
        """``count`` more places for a session that holds one already and costs more than
        one (its model's engine: ``EngineCapabilities.session_places``), or raise why not
        (1013), holding none. Never waits: the session holds its first place meanwhile,
        and a line of such sessions would hold places that serve nobody."""
        if count <= 0:
            return Place(lambda: None)
        if self.draining.is_set():
            raise ShuttingDownError("the server is shutting down; reconnect later")
        if self.active + count > self.max_sessions:
            raise OverCapacityError(
                f"a session of this model takes {count + 1} of the server's"
                f" {self.max_sessions} session places (it costs more than one stream),"
                f" and {self.max_sessions - self.active} are free; try again later"
            )
        self.active += count

        def release() -> None:
            for _ in range(count):
                self._release()

        return Place(release)

    def _withdraw(self, waiter: _Waiter) -> None:
        """A waiter leaves the line; a place it was given meanwhile goes to the next."""
        if waiter.place is not None:
            waiter.place.release()
        elif waiter in self._waiters:
            self._waiters.remove(waiter)

    def _release(self) -> None:
        if self._waiters and not self.draining.is_set():
            # Handed over: the count stays the same.
            waiter = self._waiters.popleft()
            waiter.place = Place(self._release)
            waiter.decided.set()
            return
        self.active -= 1
        if self.active == 0 and self._idle is not None:
            self._idle.set()

    @property
    def full(self) -> bool:
        """Every place is taken: a new session would be refused, or would wait."""
        return self.active >= self.max_sessions

    def announce_drain(self) -> None:
        """Tell balancers that this replica is leaving; sessions are still admitted."""
        self.announced.set()

    def start_drain(self) -> None:
        """Refuse new sessions, and every session waiting for a place, from now on."""
        self.announced.set()
        self.draining.set()
        while self._waiters:
            self._waiters.popleft().decided.set()

    def expire(self) -> None:
        """The drain timeout has passed: sessions still open close with 1012 now."""
        self.start_drain()
        self.expired.set()

    async def wait_idle(self) -> None:
        """Return once no session is live."""
        while self.active:
            if self._idle is None or self._idle.is_set():
                self._idle = anyio.Event()
            await self._idle.wait()


class Place:
    """A session's place in a count; given back once, by ``release`` or on leaving the ``with``."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        """Give the place back; safe to call twice."""
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> Place:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
