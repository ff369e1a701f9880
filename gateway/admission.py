"""Admission: at most ``max_sessions`` sessions at once, none while draining, and the drain."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

import anyio

from shared.errors import OverCapacityError, ShuttingDownError


class Admission:
    """Counts live sessions and says at once whether another may start.

    A refused session is told why right away (``OverCapacityError``, close 1013, or
    ``ShuttingDownError``, close 1012); nothing waits in line. The drain is two one-way
    events that sessions watch: ``draining`` (refuse new work, close each session as soon as
    it is between utterances) and ``expired`` (the drain timeout passed: close the rest now).
    """

    def __init__(self, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        self.active = 0
        self.draining = anyio.Event()
        self.expired = anyio.Event()
        self._idle: anyio.Event | None = None

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

    def _release(self) -> None:
        self.active -= 1
        if self.active == 0 and self._idle is not None:
            self._idle.set()

    def start_drain(self) -> None:
        self.draining.set()

    def expire(self) -> None:
        """The drain timeout has passed: sessions still open close with 1012 now."""
        self.draining.set()
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
