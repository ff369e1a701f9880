"""File transcriptions at once, and one client's share of them."""

from __future__ import annotations

from gateway.limits.transcriptions import TranscriptionLimiter


def test_requests_beyond_the_concurrency_are_refused_at_once() -> None:
    limiter = TranscriptionLimiter(1)
    assert limiter.try_take() is None
    assert limiter.try_take() == "busy"
    limiter.give()
    assert limiter.try_take() is None


def test_one_client_takes_at_most_its_share_of_the_transcription_places() -> None:
    limiter = TranscriptionLimiter(4, per_client=2)
    assert limiter.try_take("a") is None
    assert limiter.try_take("a") is None
    assert limiter.try_take("a") == "client_share"
    assert limiter.try_take("b") is None
    assert limiter.try_take("c") is None
    assert limiter.try_take("d") == "busy"
    limiter.give("a")
    assert limiter.try_take("a") is None
