"""Garbage-collector settings for low tail latency in a long-running event loop.

With hundreds of sessions the heap holds millions of long-lived objects, and CPython's
default thresholds run a full collection over all of them every few seconds: a pause of
tens of milliseconds on the one thread that serves every session (measured: p99 per-chunk
latency 73-88 ms at 500 checksum streams with the defaults, 10-16 ms tuned; BENCHMARKS.md).
``gc.freeze()`` moves what exists at start-up (modules, the app) out of the collector's
sight, and higher thresholds make full collections rare. Reference cycles are still
collected, only later.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

LATENCY_THRESHOLDS = (50_000, 50, 1_000)


@contextmanager
def latency_tuned_gc() -> Iterator[None]:
    """Freeze the start-up heap and raise the thresholds; restore both on exit."""
    previous = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*LATENCY_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
