"""What a probe's attacker spent and saw (``Attack``), and its running count while it
attacks (``Tally``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

Figure = float | int | str


@dataclass(frozen=True, slots=True)
class Attack:
    """What the attacker spent and saw. Bytes are the application's (HTTP handshakes and
    bodies, WebSocket frames with their headers), without TCP/IP's."""

    bytes_sent: int
    bytes_received: int
    connections: int  # TCP connections opened (WebSocket handshakes, HTTP connections)
    seconds: float  # how long the attacker had to keep at it
    most_held: int  # resources it held at once, at most
    held_s: tuple[float, ...]  # how long each resource was held, until the server let go
    outcomes: Mapping[str, int]  # close codes and HTTP statuses, counted
    figures: Mapping[str, Figure]  # the probe's own
    note: str  # one line: what happened
    error: str = ""  # the probe itself failed: why

    @property
    def sent_per_s(self) -> float:
        return self.bytes_sent / self.seconds if self.seconds > 0 else 0.0


class Tally:
    """The attacker's running count, frozen into an ``Attack`` at the end."""

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.connections = 0
        self.outcomes: Counter[str] = Counter()
        self.held_s: list[float] = []
        self.figures: dict[str, Figure] = {}
        self.note = ""
        self.error = ""
        self._held_now = 0
        self.most_held = 0

    def hold(self) -> None:
        self._held_now += 1
        self.most_held = max(self.most_held, self._held_now)

    def release(self, seconds: float) -> None:
        self._held_now -= 1
        self.held_s.append(seconds)

    def outcome(self, what: str) -> None:
        self.outcomes[what] += 1

    def frozen(self, seconds: float) -> Attack:
        return Attack(
            bytes_sent=self.sent,
            bytes_received=self.received,
            connections=self.connections,
            seconds=seconds,
            most_held=self.most_held,
            held_s=tuple(self.held_s),
            outcomes=dict(sorted(self.outcomes.items())),
            figures=dict(self.figures),
            note=self.note,
            error=self.error,
        )
