"""The gateway-wide budget of audio held in the gateway process.

Each session's audio is bounded by ``ASR_MAX_SESSION_SECONDS``, but an offline utterance
and a 2pass sentence are held whole in the gateway until their end, so 64 sessions of an
hour each could hold 7.4 GB. The budget (``ASR_MAX_BUFFERED_SECONDS``) bounds the sum:
past it, new sessions are refused with 1013 and an utterance that would go over it ends
with an error frame and 1013, so that an attacker's cost (sending the audio) and ours
(holding it) stay in proportion and the total never exceeds what the machine can hold.
"""

from __future__ import annotations

from gateway.audio.pcm import BYTES_PER_SECOND
from shared.errors import OverCapacityError


class AudioBudget:
    """Bytes of 16 kHz PCM held across all sessions, at most ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("the buffered audio budget must be at least one byte")
        self.max_bytes = max_bytes
        self.held = 0

    @property
    def exhausted(self) -> bool:
        return self.held >= self.max_bytes

    def take(self, size: int) -> None:
        """Hold ``size`` more bytes, or raise ``OverCapacityError`` (1013) holding nothing."""
        if self.held + size > self.max_bytes:
            raise self._spent()
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size
        assert self.held >= 0, "more audio given back than was taken"

    def check_room(self) -> None:
        """Refuse a new session (1013) while the budget is spent."""
        if self.exhausted:
            raise self._spent()

    def _spent(self) -> OverCapacityError:
        return OverCapacityError(
            f"the server holds its maximum of {self.max_bytes / BYTES_PER_SECOND:g} s"
            " of buffered audio (ASR_MAX_BUFFERED_SECONDS); try again later"
        )


class HeldAudio:
    """What one session holds of the budget; ``release_all`` at the session's end."""

    def __init__(self, budget: AudioBudget | None) -> None:
        self._budget = budget
        self.held = 0

    def take(self, size: int) -> None:
        if self._budget is not None:
            self._budget.take(size)
        self.held += size

    def give(self, size: int) -> None:
        if self._budget is not None:
            self._budget.give(size)
        self.held -= size

    def release_all(self) -> None:
        """Give back everything; safe to call twice."""
        self.give(self.held)
