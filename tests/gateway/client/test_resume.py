"""The client's resume bookkeeping, fed frames: no server, no socket."""

from __future__ import annotations

from itertools import islice

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.client.resume import (
    Acked,
    Duplicate,
    Message,
    ProtocolViolation,
    Resend,
    Result,
    ResumeTracker,
    SessionOpened,
    backoff_delays,
    is_dropped,
)


def session(token: str = "t1", **fields: object) -> dict[str, object]:
    frame: dict[str, object] = {
        "type": "session",
        "id": "s1",
        "resume_token": token,
        "resume_window_s": 30.0,
        "resumed": False,
        "utterance": 1,
        "samples": 0,
        "input_ended": False,
        "last_result": 0,
    }
    return frame | fields


def result(result_id: int, text: str = "a", is_final: bool = False) -> dict[str, object]:
    return {"mode": "online", "text": text, "is_final": is_final, "result_id": result_id}


def opened(audio_samples: int = 16000) -> ResumeTracker:
    tracker = ResumeTracker(audio_samples)
    tracker.feed(session())
    return tracker


def test_the_first_session_frame_keeps_the_token_and_window() -> None:
    tracker = ResumeTracker(16000)
    assert not tracker.can_resume
    event = tracker.feed(session("abc", resume_window_s=12))
    assert isinstance(event, SessionOpened)
    assert event.resend is None  # the first connection sends everything anyway
    assert event.frame.session_id == "s1"
    assert (tracker.token, tracker.window_s, tracker.resumes) == ("abc", 12.0, 0)
    assert tracker.can_resume


def test_new_results_are_delivered_and_their_ids_tracked() -> None:
    tracker = opened()
    first, second = result(1), result(2)
    assert tracker.feed(first) == Result(first)
    assert tracker.feed(second) == Result(second)
    assert tracker.last_result == 2
    assert tracker.duplicates == 0


def test_a_result_already_seen_is_a_duplicate() -> None:
    tracker = opened()
    for result_id in (1, 2, 3):
        tracker.feed(result(result_id))
    assert tracker.feed(result(2)) == Duplicate(2)
    assert tracker.feed(result(3)) == Duplicate(3)
    assert isinstance(tracker.feed(result(4)), Result)
    assert (tracker.duplicates, tracker.last_result) == (2, 4)


def test_results_without_an_id_always_pass() -> None:
    """A server that ignores "resumable" (FunASR's) numbers nothing: nothing is dropped."""
    tracker = ResumeTracker(16000)
    plain: Message = {"mode": "online", "text": "a", "is_final": False}
    assert tracker.feed(plain) == Result(plain)
    assert tracker.feed(plain) == Result(plain)
    assert (tracker.duplicates, tracker.last_result) == (0, 0)


def test_an_ack_is_the_newest_taken_audio() -> None:
    tracker = opened()
    assert tracker.feed({"type": "ack", "utterance": 1, "samples": 9600}) == Acked(1, 9600)
    tracker.feed({"type": "ack", "utterance": 1, "samples": 19200})
    assert tracker.acked == Acked(1, 19200)


@pytest.mark.parametrize(
    "bad", [{"utterance": 1}, {"utterance": 1, "samples": -1}, {"utterance": True, "samples": 0}]
)
def test_a_malformed_ack_is_a_violation(bad: dict[str, object]) -> None:
    with pytest.raises(ProtocolViolation, match="ack"):
        opened().feed({"type": "ack", **bad})


def test_a_resumed_session_replaces_the_token_and_says_what_to_resend() -> None:
    tracker = opened()
    tracker.feed(result(1))
    event = tracker.feed(session("t2", resumed=True, samples=4800, last_result=3))
    assert isinstance(event, SessionOpened)
    assert event.resend == Resend(from_byte=9600, send_end=True)
    assert (tracker.token, tracker.resumes) == ("t2", 1)
    assert tracker.acked == Acked(1, 4800)


def test_a_resume_after_the_end_frame_resends_no_end() -> None:
    tracker = opened(16000)
    event = tracker.feed(session("t2", resumed=True, samples=16000, input_ended=True))
    assert isinstance(event, SessionOpened)
    assert event.resend == Resend(from_byte=32000, send_end=False)


def test_each_resume_is_counted() -> None:
    tracker = opened()
    tracker.feed(session("t2", resumed=True))
    tracker.feed(session("t3", resumed=True, samples=100))
    assert (tracker.token, tracker.resumes) == ("t3", 2)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"samples": 16001}, "took 16001 samples of 16000"),
        ({"utterance": 2}, "utterance 2"),
    ],
)
def test_a_resume_the_client_cannot_follow_is_a_violation(
    fields: dict[str, object], match: str
) -> None:
    with pytest.raises(ProtocolViolation, match=match):
        opened(16000).feed(session("t2", resumed=True, **fields))


def test_a_resumed_frame_on_a_session_never_opened_is_a_violation() -> None:
    with pytest.raises(ProtocolViolation, match="never opened"):
        ResumeTracker(16000).feed(session(resumed=True))


@pytest.mark.parametrize(
    "fields",
    [{"resume_token": None}, {"samples": "0"}, {"resumed": 1}, {"resume_window_s": True}, {}],
)
def test_a_malformed_session_frame_is_a_violation(fields: dict[str, object]) -> None:
    frame = session() | fields if fields else {"type": "session", "id": "s1"}
    with pytest.raises(ProtocolViolation, match="session frame"):
        ResumeTracker(16000).feed(frame)


def test_the_resume_url_carries_the_token_and_the_last_result() -> None:
    tracker = opened()
    tracker.feed(result(1))
    tracker.feed(result(2))
    assert tracker.resume_url("ws://h:1/") == "ws://h:1/?resume=t1&last_result=2"


def test_the_resume_url_keeps_the_query_it_had() -> None:
    tracker = opened()
    url = tracker.resume_url("wss://h/asr?token=key-a&lang=zh")
    assert url == "wss://h/asr?token=key-a&lang=zh&resume=t1&last_result=0"


def test_the_resume_url_replaces_an_earlier_resume() -> None:
    tracker = opened()
    tracker.feed(session("t/2+=", resumed=True))
    url = tracker.resume_url("ws://h/?resume=t1&last_result=0&x=1")
    assert url == "ws://h/?x=1&resume=t%2F2%2B%3D&last_result=0"


def test_there_is_no_resume_url_before_a_session_frame() -> None:
    with pytest.raises(ProtocolViolation, match="nothing to resume"):
        ResumeTracker(16000).resume_url("ws://h/")


@pytest.mark.parametrize("code", [None, 1006, 1001, 1011, 1000])
def test_a_lost_connection_is_dropped(code: int | None) -> None:
    assert is_dropped(code)


@pytest.mark.parametrize("code", [4400, 4403, 4404, 4409, 4410, 4421, 1008, 1012, 1013, 1009])
def test_a_refusal_is_not_dropped(code: int) -> None:
    assert not is_dropped(code)


def test_backoff_doubles_up_to_its_cap() -> None:
    upper = list(islice(backoff_delays(0.05, 2.0, uniform=lambda: 1.0), 8))
    assert upper == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
    lower = list(islice(backoff_delays(0.05, 2.0, uniform=lambda: 0.0), 3))
    assert lower == pytest.approx([0.025, 0.05, 0.1])


@given(st.lists(st.integers(min_value=0, max_value=20), max_size=8), st.data())
def test_replays_after_any_resumes_deliver_each_result_once(
    cuts: list[int], data: st.DataObject
) -> None:
    """However often the connection drops, and from whatever K the server replays (at most
    the highest the client has), the client ends with 1..n in order, each once."""
    n = 20
    tracker = opened()
    delivered: list[object] = []
    sent = replayed = 0
    for cut in [*cuts, n]:
        start = data.draw(st.integers(min_value=0, max_value=tracker.last_result))
        replayed += sent - start
        for result_id in range(start + 1, max(sent, cut) + 1):
            event = tracker.feed(result(result_id))
            if isinstance(event, Result):
                delivered.append(event.message["result_id"])
        sent = max(sent, cut)
    assert delivered == list(range(1, n + 1))
    assert tracker.duplicates == replayed
