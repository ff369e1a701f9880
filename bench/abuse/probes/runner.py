"""Runs probes: a gateway per set of settings, the victims' baseline before and after, and
each probe beside the victims, measured from /proc while it runs."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.abuse.probes.attack import Tally
from bench.abuse.probes.context import VICTIM_ADDRESS, Context
from bench.abuse.probes.model import Footprint, Measured, Probe, Verdict, Victims
from bench.abuse.probes.server import PeakSampler, ProbedGateway
from bench.abuse.probes.victims import VictimSessions


@dataclass(frozen=True, slots=True)
class Outcome:
    probe: Probe
    measured: Measured
    verdict: Verdict
    victims_cpu_s: float  # the gateway's CPU the victims alone cost over the probe's time


@dataclass(frozen=True, slots=True)
class Baseline:
    """The victims alone on one gateway: before the probes, and after them."""

    env: Mapping[str, str]
    before: Victims
    after: Victims
    cpu_s_per_s: float  # the gateway process's CPU a second with the victims alone

    @property
    def pooled(self) -> Victims:
        return Victims(
            latencies_ms=self.before.latencies_ms + self.after.latencies_ms,
            utterances=self.before.utterances + self.after.utterances,
            verified=self.before.verified + self.after.verified,
            renewed=self.before.renewed + self.after.renewed,
            failures=self.before.failures + self.after.failures,
        )


def _victims_alone(gateway: ProbedGateway, args: argparse.Namespace) -> tuple[Victims, float]:
    victims = VictimSessions(f"ws://127.0.0.1:{gateway.port}/", args.victims, VICTIM_ADDRESS)
    victims.start()
    cpu, start = gateway.cpu_s(), time.monotonic()
    time.sleep(args.baseline)
    end = time.monotonic()
    rate = (gateway.cpu_s() - cpu) / (end - start)
    report = victims.finish((start, end))
    gateway.wait_released()
    return report, rate


def _run_probe(
    gateway: ProbedGateway, probe: Probe, args: argparse.Namespace, cpu_rate: float
) -> tuple[Measured, float]:
    victims = VictimSessions(f"ws://127.0.0.1:{gateway.port}/", args.victims, VICTIM_ADDRESS)
    victims.start()
    log_before = len(gateway.log_text())
    rss, workers_rss = gateway.rss_mib(), gateway.workers_rss_mib()
    cpu, workers_cpu = gateway.cpu_s(), gateway.workers_cpu_s()
    tally = Tally()
    with PeakSampler(gateway.process.pid, gateway.worker_pids) as sampler:
        start = time.monotonic()
        try:
            context = Context(gateway, args.seconds, tally, args.victims)
            attack = asyncio.run(probe.attack(context))
        except Exception as exc:  # one probe's fault is its row's, not the run's
            tally.error = f"{type(exc).__name__}: {exc}"[:200]
            attack = tally.frozen(time.monotonic() - start)
        end = time.monotonic()
    cpu_used, workers_used = gateway.cpu_s() - cpu, gateway.workers_cpu_s() - workers_cpu
    report = victims.finish((start, end))
    gateway.wait_released()
    log = gateway.log_text()[log_before:]
    victims_cpu = cpu_rate * (end - start)
    footprint = Footprint(
        rss_before_mib=rss,
        rss_peak_mib=max(sampler.gateway_peak_mib, rss),
        rss_after_mib=gateway.rss_mib(),
        workers_rss_before_mib=workers_rss,
        workers_rss_peak_mib=max(sampler.workers_peak_mib, workers_rss),
        cpu_s=cpu_used,
        workers_cpu_s=workers_used,
        wall_s=end - start,
        log_lines=sum(1 for line in log.splitlines() if line.strip() and not _info(line)),
        tracebacks=log.count("Traceback"),
    )
    return Measured(attack, footprint, report, report, gateway.env), victims_cpu


def _info(line: str) -> bool:
    return line.startswith("INFO:")


def run(probes: Sequence[Probe], args: argparse.Namespace) -> tuple[list[Outcome], list[Baseline]]:
    """Every probe, grouped by the settings it needs (one gateway per group), in order."""
    groups: dict[tuple[tuple[str, str], ...], list[Probe]] = {}
    for probe in probes:
        groups.setdefault(tuple(sorted(probe.env.items())), []).append(probe)
    outcomes: list[Outcome] = []
    baselines: list[Baseline] = []
    args.logs.mkdir(parents=True, exist_ok=True)
    for number, (env, members) in enumerate(groups.items()):
        gateway = ProbedGateway(dict(env), args.logs / f"gateway-{number}.log")
        try:
            before, rate_before = _victims_alone(gateway, args)
            measured: list[tuple[Probe, Measured, float]] = []
            for probe in members:
                print(f"probe {probe.name} ...", flush=True)
                result, victims_cpu = _run_probe(gateway, probe, args, rate_before)
                measured.append((probe, result, victims_cpu))
            after, rate_after = _victims_alone(gateway, args)
        finally:
            gateway.stop()
        baseline = Baseline(gateway.env, before, after, (rate_before + rate_after) / 2)
        baselines.append(baseline)
        for probe, result, victims_cpu in measured:
            result = Measured(
                result.attack, result.footprint, result.victims, baseline.pooled, result.env
            )
            verdict = (
                Verdict(False, f"the probe failed: {result.attack.error}")
                if result.attack.error
                else probe.judge(result)
            )
            outcomes.append(Outcome(probe, result, verdict, victims_cpu))
            print(f"  {probe.name}: {outcomes[-1].verdict.why}", flush=True)
    return outcomes, baselines


def default_logs() -> Path:
    return Path("bench/results/probes")
