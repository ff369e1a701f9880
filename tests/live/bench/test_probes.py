"""bench.abuse.probes' tiny run: two probes against a real uvicorn, victims beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.abuse.probes import catalog, report, runner
from bench.abuse.probes.__main__ import markdown, parse_args

pytestmark = pytest.mark.slow


def test_two_probes_measure_their_bounds_and_the_victims(tmp_path: Path) -> None:
    args = parse_args(
        ["--seconds", "2", "--victims", "2", "--baseline", "2", "--logs", str(tmp_path)]
    )
    probes = catalog.by_name(["silent", "per-client"])
    outcomes, baselines = runner.run(probes, args)
    assert [outcome.probe.name for outcome in outcomes] == ["silent", "per-client"]
    silent, per_client = outcomes
    assert silent.verdict.holds, silent.verdict.why
    assert set(silent.measured.attack.outcomes) == {"close 1008"}  # ASR_CONFIG_TIMEOUT
    assert per_client.verdict.holds, per_client.verdict.why
    assert per_client.measured.attack.figures["admitted"] == 8
    for outcome in outcomes:
        victims = outcome.measured.victims
        assert victims.verified == victims.utterances > 0
        assert not victims.failures
        assert outcome.measured.footprint.tracebacks == 0
    assert len(baselines) == 1
    assert baselines[0].before.latencies_ms
    text = markdown(outcomes, baselines)
    assert text.count("\n| places |") == 2
    assert "per-client" in report.as_json(outcomes, baselines)
