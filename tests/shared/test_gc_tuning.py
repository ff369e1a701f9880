from __future__ import annotations

import gc

from shared.gc_tuning import LATENCY_THRESHOLDS, latency_tuned_gc


def test_tuning_applies_and_restores() -> None:
    before = gc.get_threshold()
    with latency_tuned_gc():
        assert gc.get_threshold() == LATENCY_THRESHOLDS
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
