"""``RepeatedFault``: a fault that repeats many times a second gets a few log lines."""

from __future__ import annotations

from gateway.ops.fault_log import RepeatedFault

ERROR = "[Errno 24] Too many open files"


def fault() -> RepeatedFault:
    return RepeatedFault("agent port: accept", "agent port: accepting again", every_s=60.0)


def test_the_first_failure_is_logged_with_the_error_and_the_retry() -> None:
    line = fault().failed(100.0, ERROR, 0.1)
    assert line == f"agent port: accept failed ({ERROR}); retrying every 0.1 s"


def test_a_failure_every_tenth_of_a_second_for_ten_minutes_gets_eleven_lines() -> None:
    repeated = fault()
    lines = [repeated.failed(t / 10, ERROR, 0.1) for t in range(6000)]
    logged = [line for line in lines if line is not None]
    assert len(logged) == 10  # the start, then one a minute
    assert (
        logged[1]
        == f"agent port: accept still failing ({ERROR}): 600 more failures in the last 60 s"
    )
    end = repeated.succeeded(600.0)
    assert end == "agent port: accepting again after 6000 failures over 600.0 s"


def test_a_success_without_a_fault_says_nothing() -> None:
    repeated = fault()
    assert repeated.succeeded(1.0) is None
    assert not repeated.failing


def test_a_second_fault_after_the_first_ended_is_logged_as_new() -> None:
    repeated = fault()
    repeated.failed(0.0, ERROR, 0.1)
    repeated.failed(0.1, ERROR, 0.1)
    assert repeated.succeeded(0.2) == "agent port: accepting again after 2 failures over 0.2 s"
    assert repeated.failed(0.3, ERROR, 0.1) is not None
    assert repeated.failing
