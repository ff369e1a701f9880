"""Every probe, in the order of the table."""

from __future__ import annotations

from bench.abuse.probes import http, loop, memory, parked, places, work
from bench.abuse.probes.model import Probe

PROBES: list[Probe] = [
    *places.PROBES,
    *parked.PROBES,
    *memory.PROBES,
    *http.UPLOADS,
    *loop.PROBES,
    *http.STATUS,
    *work.PROBES,
]


def by_name(names: list[str]) -> list[Probe]:
    known = {probe.name: probe for probe in PROBES}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"no such probe: {', '.join(unknown)} (see --list)")
    return [known[name] for name in names]
