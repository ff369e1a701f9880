"""What a probe is and what it measures: the attacker's tally, the server's footprint, the
victims' latency, and the verdict against what README.md promises."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.common.stats import distribution

if TYPE_CHECKING:
    from bench.abuse.probes.context import Context

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


@dataclass(frozen=True, slots=True)
class Footprint:
    """What the gateway process (and its workers) spent while the probe ran."""

    rss_before_mib: float
    rss_peak_mib: float
    rss_after_mib: float  # once the server says it holds nothing of the probe's
    workers_rss_before_mib: float
    workers_rss_peak_mib: float
    cpu_s: float  # the gateway process: utime + stime
    workers_cpu_s: float
    wall_s: float
    log_lines: int  # lines the gateway logged meanwhile, INFO lines left out
    tracebacks: int

    @property
    def rss_growth_mib(self) -> float:
        return self.rss_peak_mib - self.rss_before_mib

    @property
    def workers_growth_mib(self) -> float:
        return self.workers_rss_peak_mib - self.workers_rss_before_mib


@dataclass(frozen=True, slots=True)
class Victims:
    """Honest real-time sessions beside the probe: each 600 ms chunk's latency, from the
    send of its last byte to its result, and what went wrong for them."""

    latencies_ms: tuple[float, ...]
    utterances: int
    verified: int
    renewed: int  # sessions that reached ASR_MAX_SESSION_SECONDS and reconnected
    failures: tuple[str, ...]  # anything else: a refusal, an error frame, a bad checksum

    @property
    def p50_ms(self) -> float:
        return distribution(list(self.latencies_ms)).p50

    @property
    def p99_ms(self) -> float:
        return distribution(list(self.latencies_ms)).p99


@dataclass(frozen=True, slots=True)
class Verdict:
    holds: bool | None  # None: README promises nothing to check against
    why: str


@dataclass(frozen=True, slots=True)
class Measured:
    attack: Attack
    footprint: Footprint
    victims: Victims
    baseline: Victims
    env: Mapping[str, str]  # the gateway's ASR_* settings

    def setting(self, name: str) -> float:
        return float(self.env[name])


AttackFn = Callable[["Context"], Coroutine[None, None, Attack]]
Judge = Callable[["Measured"], "Verdict"]


@dataclass(frozen=True, slots=True)
class Probe:
    name: str
    resource: str  # places, parked slots, memory, event-loop time, a worker's time
    endpoint: str
    what: str  # what the attacker does
    bound: str  # the setting or constant that stops it
    attack: AttackFn
    judge: Judge
    env: Mapping[str, str] = field(default_factory=dict)  # over the profile's settings


def held_at_most(limit_s: float, slack_s: float = 1.0) -> Judge:
    """A verdict for places: every resource was let go within ``limit_s`` (+ slack)."""

    def judge(measured: Measured) -> Verdict:
        held = measured.attack.held_s
        if not held:
            return Verdict(False, "nothing was held: the probe did not run")
        longest = max(held)
        holds = longest <= limit_s + slack_s
        return Verdict(holds, f"held at most {longest:.2f} s against {limit_s:g} s")

    return judge
