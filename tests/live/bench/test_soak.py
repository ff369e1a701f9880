"""The soak's short variant: bench.reliability.soak against a real uvicorn, leak checks included."""

from __future__ import annotations

import pytest

from bench.reliability import soak

pytestmark = pytest.mark.slow


def test_short_soak_leaks_nothing_and_verifies_every_completed_session() -> None:
    args = soak.parse_args(
        ["--sessions", "80", "--concurrency", "16", "--max-audio", "1.5", "--fast", "--quiet"]
    )
    report = soak.run(args)
    assert report.sessions == 80
    assert all(report.by_kind[kind] > 0 for kind in soak.KINDS)  # every kind exercised
    assert not report.failures, report.failures[:3]
    assert report.verified == report.by_kind["complete"] + report.by_kind["two"]
    assert report.leaks == [], soak.markdown(report)
    assert report.after.free_slots == report.before.free_slots > 0
