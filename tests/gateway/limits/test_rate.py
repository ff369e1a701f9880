"""The frame budget (gateway.limits.rate), fed times by hand: no clock, no socket."""

from __future__ import annotations

import pytest

from gateway.limits.rate import (
    FULL_FRAME_BYTES,
    TEXT_CHARS_PER_TOKEN,
    TokenBucket,
    frame_cost,
    text_cost,
)


def test_a_full_bucket_takes_its_burst_at_once_then_refuses() -> None:
    bucket = TokenBucket(rate=10.0, burst=5.0, now=0.0)
    assert all(bucket.take(1.0, 0.0) for _ in range(5))
    assert not bucket.take(1.0, 0.0)


def test_tokens_come_back_at_the_rate() -> None:
    bucket = TokenBucket(rate=10.0, burst=5.0, now=0.0)
    for _ in range(5):
        bucket.take(1.0, 0.0)
    assert not bucket.take(1.0, 0.05)  # half a token back
    assert bucket.take(1.0, 0.1)
    assert not bucket.take(1.0, 0.1)
    assert bucket.take(1.0, 0.2)


def test_a_refused_take_spends_nothing() -> None:
    bucket = TokenBucket(rate=1.0, burst=2.0, now=0.0)
    bucket.take(1.5, 0.0)
    assert not bucket.take(1.0, 0.0)
    assert bucket.tokens == pytest.approx(0.5)
    assert bucket.take(0.5, 0.0)


def test_the_bucket_never_holds_more_than_its_burst() -> None:
    bucket = TokenBucket(rate=100.0, burst=3.0, now=0.0)
    assert all(bucket.take(1.0, 3600.0) for _ in range(3))
    assert not bucket.take(1.0, 3600.0)


def test_a_sender_at_the_rate_is_never_refused() -> None:
    bucket = TokenBucket(rate=200.0, burst=200.0, now=0.0)
    assert all(bucket.take(1.0, i / 200.0) for i in range(10_000))


def test_a_sender_over_the_rate_is_refused_once_its_burst_is_spent() -> None:
    bucket = TokenBucket(rate=200.0, burst=200.0, now=0.0)
    taken = 0
    for i in range(10_000):  # 1000 a second
        if not bucket.take(1.0, i / 1000.0):
            break
        taken += 1
    # The burst and what came back meanwhile: 200 / (1 - 200/1000).
    assert taken == pytest.approx(250, abs=1)


def test_a_clock_that_steps_back_gives_nothing() -> None:
    bucket = TokenBucket(rate=8.0, burst=1.0, now=5.0)
    assert bucket.take(1.0, 5.0)
    assert not bucket.take(1.0, 4.0)
    assert not bucket.take(1.0, 5.0625)  # half a token since 5.0, none for the step back
    assert bucket.take(1.0, 5.125)


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.5)])
def test_needs_a_positive_rate_and_a_burst_of_one(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match=r"rate|burst"):
        TokenBucket(rate, burst, 0.0)


def test_a_text_frame_costs_a_token_a_kib_of_json() -> None:
    assert text_cost(0) == text_cost(300) == text_cost(TEXT_CHARS_PER_TOKEN) == 1.0
    assert text_cost(64 * 1024) == 64.0


def test_a_frame_costs_less_the_more_audio_it_carries() -> None:
    assert frame_cost(None) == 1.0  # text
    assert frame_cost(0) == 1.0
    assert frame_cost(2) == pytest.approx(1.0 - 2 / FULL_FRAME_BYTES)
    assert frame_cost(FULL_FRAME_BYTES // 2) == pytest.approx(0.5)
    assert frame_cost(FULL_FRAME_BYTES) == 0.0
    assert frame_cost(1920) == 0.0  # FunASR's 60 ms frames
    assert frame_cost(204_800) == 0.0  # FunASR's C++ client's
