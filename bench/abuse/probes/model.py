"""What a probe is and what it measures: the attacker's tally, the server's footprint, the
victims' latency, and the verdict against what README.md promises."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.abuse.probes.attack import Attack
from bench.common.stats import distribution

if TYPE_CHECKING:
    from bench.abuse.probes.context import Context


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
