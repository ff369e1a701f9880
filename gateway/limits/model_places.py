"""A served model's own cap of live sessions (``max_sessions`` in ``ASR_MODELS``), taken
beside one of the gateway-wide ``ASR_MAX_SESSIONS`` places: one model full refuses only its
own sessions, at once, with 1013."""

from __future__ import annotations

from gateway.limits.admission import Place
from shared.errors import OverCapacityError


class ModelPlaces:
    """The live sessions of model ``name``, at most ``max_sessions`` (None: no cap of its
    own, only the gateway's)."""

    def __init__(self, name: str, max_sessions: int | None) -> None:
        if max_sessions is not None and max_sessions < 1:
            raise ValueError("a model's max_sessions must be at least 1")
        self.name = name
        self.max_sessions = max_sessions
        self.active = 0

    @property
    def full(self) -> bool:
        return self.max_sessions is not None and self.active >= self.max_sessions

    def take(self) -> Place:
        """One of the model's places, or ``OverCapacityError`` (1013) when all are taken."""
        if self.full:
            raise OverCapacityError(
                f"model {self.name!r} is serving its maximum of {self.max_sessions} sessions;"
                " try again later"
            )
        self.active += 1
        return Place(self._release)

    def _release(self) -> None:
        self.active -= 1
