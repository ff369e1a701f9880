"""The probes' table in Markdown (one row a probe), and everything measured as JSON."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from bench.abuse.probes.runner import Baseline, Outcome
from bench.abuse.probes.server import PROFILE
from bench.common.report import header


def _bytes(size: float) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size:.0f} B"


def _held(held: Sequence[float]) -> str:
    if not held:
        return "nothing held"
    median, longest = statistics.median(held), max(held)
    return f"held {median:.2f} s (max {longest:.2f} s)"


def client_cell(outcome: Outcome) -> str:
    attack = outcome.measured.attack
    return (
        f"{attack.note}. In all: {attack.connections} connections, {_bytes(attack.bytes_sent)}"
        f" sent ({_bytes(attack.sent_per_s)}/s), {_bytes(attack.bytes_received)} received,"
        f" for {attack.seconds:.1f} s"
    )


def us_cell(outcome: Outcome) -> str:
    measured = outcome.measured
    attack, footprint, victims, baseline = (
        measured.attack,
        measured.footprint,
        measured.victims,
        measured.baseline,
    )
    cpu = footprint.cpu_s - outcome.victims_cpu_s
    parts = [
        f"{_held(attack.held_s)}, {attack.most_held} at once",
        f"RSS {footprint.rss_growth_mib:+.1f} MiB at the peak"
        f" ({footprint.rss_after_mib - footprint.rss_before_mib:+.1f} once released)",
        f"CPU {cpu:.2f} s over the victims' own ({100 * cpu / footprint.wall_s:.0f} % of a core)",
    ]
    if abs(footprint.workers_growth_mib) >= 1 or footprint.workers_cpu_s >= 0.5:
        parts.append(
            f"workers +{footprint.workers_growth_mib:.1f} MiB, {footprint.workers_cpu_s:.2f} s CPU"
        )
    parts.append(
        f"victims p50/p99 {victims.p50_ms:.0f}/{victims.p99_ms:.0f} ms against"
        f" {baseline.p50_ms:.0f}/{baseline.p99_ms:.0f} ({len(victims.latencies_ms)} chunks)"
    )
    if victims.failures:
        parts.append(f"victims' failures: {len(victims.failures)} ({victims.failures[0]})")
    outcomes = ", ".join(f"{name} x{count}" for name, count in attack.outcomes.items())
    parts.append(f"seen: {outcomes}")
    if footprint.tracebacks:
        parts.append(f"{footprint.tracebacks} tracebacks in the log")
    return "; ".join(parts)


def _verdict(outcome: Outcome) -> str:
    holds = outcome.verdict.holds
    word = "yes" if holds else "no promise" if holds is None else "**NO**"
    return f"{word}: {outcome.verdict.why}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(outcomes: Sequence[Outcome]) -> str:
    lines = [
        *header(
            "resource",
            "endpoint",
            "probe",
            "what it costs the client",
            "what it costs us",
            "bound",
            "within the promise?",
        ),
    ]
    for outcome in outcomes:
        probe = outcome.probe
        cells = [
            probe.resource,
            f"`{probe.endpoint}`",
            f"**{probe.name}**: {probe.what}",
            client_cell(outcome),
            us_cell(outcome),
            probe.bound,
            _verdict(outcome),
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def baselines(groups: Sequence[Baseline]) -> str:
    lines = [
        *header(
            "settings over the profile",
            "victims alone before: p50/p99 ms",
            "after",
            "gateway CPU a second",
        ),
    ]
    for group in groups:
        changed = {k: v for k, v in group.env.items() if PROFILE.get(k) != v}
        changed.pop("ASR_AGENT_PORT", None)
        name = ", ".join(f"`{k}={v}`" for k, v in changed.items()) or "(the profile)"
        lines.append(
            f"| {name} | {group.before.p50_ms:.0f}/{group.before.p99_ms:.0f}"
            f" ({len(group.before.latencies_ms)} chunks) | {group.after.p50_ms:.0f}/"
            f"{group.after.p99_ms:.0f} ({len(group.after.latencies_ms)}) |"
            f" {100 * group.cpu_s_per_s:.0f} % |"
        )
    return "\n".join(lines)


def machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()},"
        f" load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the end of the run"
    )


def as_json(outcomes: Sequence[Outcome], groups: Sequence[Baseline]) -> str:
    def one(outcome: Outcome) -> dict[str, Any]:
        measured = outcome.measured
        return {
            "probe": outcome.probe.name,
            "resource": outcome.probe.resource,
            "endpoint": outcome.probe.endpoint,
            "attack": asdict(measured.attack),
            "footprint": asdict(measured.footprint),
            "victims_cpu_s": outcome.victims_cpu_s,
            "victims": {
                "p50_ms": measured.victims.p50_ms,
                "p99_ms": measured.victims.p99_ms,
                "chunks": len(measured.victims.latencies_ms),
                "utterances": measured.victims.utterances,
                "verified": measured.victims.verified,
                "renewed": measured.victims.renewed,
                "failures": list(measured.victims.failures),
            },
            "baseline": {"p50_ms": measured.baseline.p50_ms, "p99_ms": measured.baseline.p99_ms},
            "verdict": asdict(outcome.verdict),
            "env": dict(measured.env),
        }

    return json.dumps(
        {
            "probes": [one(outcome) for outcome in outcomes],
            "baselines": [
                {
                    "env": dict(g.env),
                    "before": [g.before.p50_ms, g.before.p99_ms],
                    "after": [g.after.p50_ms, g.after.p99_ms],
                }
                for g in groups
            ],
        },
        indent=1,
        default=str,
    )
