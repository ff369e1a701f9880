"""Every deadline of the suite, scaled by one factor: on a slow machine (an emulated CPU, a
busy CI host) set ``ASR_TEST_TIME_FACTOR=3`` and every ``within`` allows three times as
long, rather than a hundred numbers changing (as websockets' tests scale theirs)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

FACTOR = float(os.environ.get("ASR_TEST_TIME_FACTOR", "1"))


def scaled(seconds: float) -> float:
    """``seconds`` as this machine needs them."""
    return seconds * FACTOR


@contextmanager
def within(seconds: float) -> Iterator[anyio.CancelScope]:
    """``anyio.fail_after(seconds)``, scaled: what a test allows before it calls a wait hung."""
    with anyio.fail_after(scaled(seconds)) as scope:
        yield scope
