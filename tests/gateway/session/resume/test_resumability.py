"""A session's resume rules, sans I/O (``gateway.session.resume.resumability``): which token
a resume may use, how often the previous one works, and how often a session may be resumed."""

from __future__ import annotations

import json

import pytest
from starlette.websockets import WebSocket

from gateway.metrics import GatewayMetrics
from gateway.session.resume.resumability import RESUME_BURST, Resumability
from gateway.session.resume.resumes import ResumableSessions
from gateway.session.resume.token import TokenClaim
from shared.errors import (
    ResumeDisplacedError,
    ResumeExpiredError,
    ResumeForbiddenError,
    ResumeReusedError,
    ResumeThrottledError,
)

pytestmark = pytest.mark.anyio

OWNER = "owner-digest"


class _Session:
    def attach(self, *args: object) -> object:  # only registered, never called here
        raise AssertionError


def _state(
    per_minute: float = 6000.0, window_s: float = 30.0
) -> tuple[Resumability, ResumableSessions]:
    sessions = ResumableSessions("gw-1", window_s, 4)
    session_id = sessions.register(_Session())  # type: ignore[arg-type]
    state = Resumability(
        sessions, session_id, owner=OWNER, client="c", resumes_per_minute=per_minute, now=0.0
    )
    return state, sessions


def _issue(state: Resumability, newest: int = 0) -> str:
    """A session frame going out now; its token."""
    frame = state.session_frame(
        resumed=True, utterance=1, samples=0, input_ended=False, newest_result=newest
    )
    token: str = json.loads(frame)["resume_token"]
    return token


def _generation(state: Resumability, sessions: ResumableSessions, newest: int = 0) -> int:
    """The generation of the token a session frame would carry now."""
    return sessions.signer.read(_issue(state, newest)).generation


def _claim(state: Resumability, generation: int, last_result: int = 0, now: float = 0.0) -> None:
    state.claim(TokenClaim(state.session_id, generation), last_result, OWNER, now)


def test_each_resume_takes_the_current_token_and_moves_it_on() -> None:
    state, sessions = _state()
    assert _generation(state, sessions) == 1
    _claim(state, 1)
    assert _generation(state, sessions) == 2
    state.heard()  # the client read token 2 and sent a frame
    with pytest.raises(ResumeReusedError):
        _claim(state, 1)
    _claim(state, 2)
    assert _generation(state, sessions) == 3


def test_the_previous_token_works_once_while_the_client_cannot_have_the_next() -> None:
    """A resume's answer lost with its connection: the token it used works again, once;
    a client that then stays silent (waiting for its final result) does not renew it."""
    state, sessions = _state()
    _issue(state, 0)
    _claim(state, 1, last_result=0)
    assert _generation(state, sessions, newest=3) == 2  # its session frame went out, lost
    _claim(state, 1, last_result=0)  # the one use
    assert _generation(state, sessions, newest=3) == 2  # the same next token
    for _ in range(10):  # nothing was heard since, and the session frame went out again
        with pytest.raises(ResumeReusedError):
            _claim(state, 1, last_result=0)
    _claim(state, 2)  # the current one still works


def test_the_previous_token_works_before_the_next_one_ever_went_out() -> None:
    """The resume's connection dropped before its session frame: whatever the old
    connection heard, the client cannot have the next token."""
    state, _ = _state()
    _issue(state, 0)
    state.heard()
    _claim(state, 1)
    _claim(state, 1)  # the next token was never issued
    with pytest.raises(ResumeReusedError):
        _claim(state, 1)


def test_the_previous_token_is_refused_once_the_client_has_read_the_next() -> None:
    state, _ = _state()
    _issue(state, 0)
    _claim(state, 1)
    _issue(state, 5)  # the session frame: the newest result then was 5
    with pytest.raises(ResumeReusedError):
        _claim(state, 1, last_result=6)  # a result after the frame: it read the frame
    state.heard()
    with pytest.raises(ResumeReusedError):
        _claim(state, 1, last_result=5)  # it sent a frame after reading it


def test_another_api_key_is_forbidden_and_uses_nothing_up() -> None:
    state, _ = _state()
    with pytest.raises(ResumeForbiddenError):
        state.claim(TokenClaim(state.session_id, 1), 0, "someone-else", 0.0)
    _claim(state, 1)


def test_resumes_are_rate_limited_per_session_without_using_the_token_up() -> None:
    state, sessions = _state(per_minute=30.0)  # one every 2 s, after a burst
    for generation in range(1, RESUME_BURST + 1):
        _claim(state, generation, now=0.0)
        _issue(state, 0)
        state.heard()
    current = RESUME_BURST + 1
    with pytest.raises(ResumeThrottledError, match=r"retry in 2\.0 s"):
        _claim(state, current, now=0.0)
    with pytest.raises(ResumeThrottledError, match=r"retry in 1\.0 s"):
        _claim(state, current, now=1.0)
    _claim(state, current, now=2.0)  # the same token, a moment later
    assert _generation(state, sessions) == current + 1


async def test_a_later_resume_displaces_one_not_yet_served() -> None:
    state, _ = _state(window_s=0.01)
    websocket = WebSocket({"type": "websocket"}, _no_receive, _no_send)
    first = state.hand_over(websocket, 0)
    second = state.hand_over(websocket, 0)
    assert isinstance(first.refusal, ResumeDisplacedError)
    assert first.refusal.outcome == "displaced"
    assert second.refusal is None
    metrics = GatewayMetrics()
    assert await state.next_connection(metrics) is second
    assert await state.next_connection(metrics) is None  # the window passed
    assert _counted(metrics, "asr_resumes_total", outcome="resumed") == 1


async def test_a_session_ended_refuses_the_resume_waiting_and_is_forgotten() -> None:
    state, sessions = _state()
    token = _issue(state, 0)
    websocket = WebSocket({"type": "websocket"}, _no_receive, _no_send)
    waiting = state.hand_over(websocket, 0)
    state.forget()
    assert isinstance(waiting.refusal, ResumeExpiredError)
    with pytest.raises(ResumeExpiredError):
        sessions.find(token)


async def test_a_drop_past_the_clients_share_is_not_parked() -> None:
    sessions = ResumableSessions("gw-1", 30.0, 4, max_parked_per_client=1)
    assert sessions.try_park("c")  # another session of the same client, parked
    state = Resumability(
        sessions,
        sessions.register(_Session()),  # type: ignore[arg-type]
        owner=OWNER,
        client="c",
        resumes_per_minute=30.0,
        now=0.0,
    )
    metrics = GatewayMetrics()
    assert await state.next_connection(metrics) is None
    assert sessions.parked == 1
    assert _counted(metrics, "asr_parking_refused_total") == 1


async def _no_receive() -> dict[str, object]:
    raise AssertionError


async def _no_send(message: object) -> None:
    raise AssertionError


def _counted(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
