"""The sans-I/O parts of resumable sessions: tokens, the outbox, the parser's resume frame,
the resume query."""

from __future__ import annotations

import json
import tracemalloc

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from gateway.funasr.parser import ProtocolParser, ResumeRequested
from gateway.session.outbox import RESUME_BYTES, Outbox
from gateway.session.resume.resumes import ResumableSessions, ResumeQuery, resume_query
from gateway.session.resume.token import TokenClaim, TokenSigner, new_session_id
from shared.errors import (
    ProtocolError,
    ResultsGoneError,
    ResumeError,
    ResumeExpiredError,
    ResumeMisdirectedError,
)
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio


# -- tokens ------------------------------------------------------------------------------


def test_a_token_names_its_replica_and_reads_back_as_issued() -> None:
    signer = TokenSigner("gw-1")
    session_id = new_session_id()
    token = signer.issue(session_id, 3)
    assert token.startswith(f"gw-1.{session_id}.3.")
    assert signer.read(token) == TokenClaim(session_id, 3)


def test_a_token_carries_at_least_128_unguessable_bits() -> None:
    token = TokenSigner("gw-1").issue(new_session_id(), 1)
    mac = token.rsplit(".", 1)[1]
    assert len(mac) * 6 >= 256  # HMAC-SHA256, base64url


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # the MAC
        lambda t: t.replace(".1.", ".2."),  # the generation
        lambda t: "gw-1." + "x" * 16 + "." + t.split(".", 2)[2],  # the session
        lambda t: t + ".",
        lambda t: "",
    ],
)
def test_a_tampered_token_is_refused(tamper: object) -> None:
    signer = TokenSigner("gw-1")
    token = signer.issue(new_session_id(), 1)
    assert callable(tamper)
    with pytest.raises(ResumeError) as refused:
        signer.read(tamper(token))
    assert type(refused.value) is ResumeError


def test_another_replicas_token_says_where_the_session_is() -> None:
    token = TokenSigner("gw-2").issue(new_session_id(), 1)
    with pytest.raises(ResumeMisdirectedError) as refused:
        TokenSigner("gw-1").read(token)
    assert refused.value.replica == "gw-2"
    assert refused.value.close_code == 4421


def test_a_token_from_before_a_restart_is_not_ours() -> None:
    """Same replica name, new key: the sessions it named are gone."""
    token = TokenSigner("gw-1").issue(new_session_id(), 1)
    with pytest.raises(ResumeError, match="not one this server issued"):
        TokenSigner("gw-1").read(token)


def test_a_genuine_token_of_a_session_no_longer_held_has_expired() -> None:
    sessions = ResumableSessions("gw-1", 30.0, 4)
    token = sessions.signer.issue(new_session_id(), 1)
    with pytest.raises(ResumeExpiredError):
        sessions.find(token)


def test_parking_places_are_bounded() -> None:
    sessions = ResumableSessions("gw-1", 30.0, 2)
    assert sessions.try_park("a")
    assert sessions.try_park("b")
    assert not sessions.try_park("c")
    sessions.unpark("a")
    assert sessions.try_park("c")


def test_one_client_takes_at_most_its_share_of_the_parking_places() -> None:
    sessions = ResumableSessions("gw-1", 30.0, 4, max_parked_per_client=2)
    assert sessions.try_park("a")
    assert sessions.try_park("a")
    assert not sessions.try_park("a")
    assert sessions.try_park("b")  # another client still parks
    sessions.unpark("a")
    assert sessions.try_park("a")
    assert sessions.try_park("b")
    assert not sessions.try_park("c")  # all four taken


# -- the resume query and frame ----------------------------------------------------------


def test_the_resume_query() -> None:
    assert resume_query(b"token=k") is None
    assert resume_query(b"token=k&resume=a.b&last_result=7") == ResumeQuery("a.b", 7)
    assert resume_query(b"resume=a.b") == ResumeQuery("a.b", 0)
    for bad in (b"resume=a&last_result=-1", b"resume=a&last_result=x", b"resume=a&last_result="):
        with pytest.raises(ProtocolError, match="last_result"):
            resume_query(bad)


def test_a_resume_frame_is_only_a_connections_first() -> None:
    parser = ProtocolParser()
    frame = json.dumps({"resume": "tok", "last_result": 4})
    assert parser.receive_text(frame) == [ResumeRequested("tok", 4)]
    parser = ProtocolParser()
    parser.receive_text(json.dumps({"mode": "online", "is_speaking": True}))
    with pytest.raises(ProtocolError, match="first frame"):
        parser.receive_text(frame)


@pytest.mark.parametrize(
    "fields",
    [{"resume": 5}, {"resume": "t", "last_result": -1}, {"resume": "t", "last_result": "1"}],
)
def test_a_bad_resume_frame_is_a_protocol_error(fields: dict[str, object]) -> None:
    with pytest.raises(ProtocolError):
        ProtocolParser().receive_text(json.dumps(fields))


def test_a_reconnection_drops_half_a_sample() -> None:
    """The client resends from the last whole sample the server took."""
    parser = ProtocolParser()
    parser.receive_text(json.dumps({"mode": "online", "is_speaking": True}))
    parser.receive_bytes(b"\x01\x02\x03")
    assert parser.samples_taken == 1
    parser.reconnected()
    [event] = parser.receive_bytes(b"\x03\x04")
    assert getattr(event, "pcm", None) == b"\x03\x04"  # not b"\x03\x03" + a stray byte
    assert parser.samples_taken == 2


# -- the outbox --------------------------------------------------------------------------


async def test_frames_are_numbered_from_the_moment_the_session_is_resumable() -> None:
    outbox = Outbox()
    await outbox.put('{"text": "a"}')
    outbox.number_from_now()
    await outbox.put('{"text": "b"}')
    assert outbox.next_unsent() == (1, '{"text": "a"}')
    outbox.sent(1)
    number, text = outbox.next_unsent() or (0, "")
    assert json.loads(text) == {"text": "b", "result_id": 2}
    assert number == 2


async def test_a_rewind_hands_the_frames_after_last_result_again() -> None:
    outbox = Outbox()
    outbox.number_from_now()
    for letter in "abcd":
        await outbox.put(json.dumps({"text": letter}))
    outbox.sent(4)  # all handed to a connection that then dropped
    assert outbox.next_unsent() is None
    outbox.rewind(2)
    assert [json.loads(t)["text"] for t in outbox.unsent()] == ["c", "d"]
    with pytest.raises(ResultsGoneError):
        outbox.rewind(1)  # the client said it had 1 and 2: they are dropped
    with pytest.raises(ResultsGoneError):
        outbox.check_resume(5)  # never issued


async def test_sent_frames_are_kept_only_within_the_bound() -> None:
    outbox = Outbox()
    outbox.number_from_now(retain_bytes=100)
    for index in range(10):
        await outbox.put(json.dumps({"text": "x" * 20, "i": index}))
    outbox.sent(10)
    outbox.check_resume(10)
    with pytest.raises(ResultsGoneError, match="no longer held"):
        outbox.check_resume(0)


async def test_a_non_resumable_outbox_keeps_nothing_sent() -> None:
    outbox = Outbox()
    await outbox.put("{}")
    outbox.sent(1)
    assert outbox.unsent() == []
    with pytest.raises(ResultsGoneError):
        outbox.rewind(0)


async def test_put_waits_while_the_unsent_frames_fill_the_bound() -> None:
    outbox = Outbox(unsent_bytes=10)
    await outbox.put('{"a": 12345}')  # one frame always goes in, whatever its size
    done = anyio.Event()

    async def put_second() -> None:
        await outbox.put('{"b": 1}')
        done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(put_second)
        await wait_all_tasks_blocked()
        assert not done.is_set()
        outbox.sent(1)
        with within(1):
            await done.wait()


@pytest.mark.parametrize("wav_name", ["meeting-01.wav", "会议记录.wav", "🎤 take 2.wav"])
async def test_a_full_resumable_outbox_holds_at_most_its_bound_in_memory(wav_name: str) -> None:
    """Measured with tracemalloc, not counted: a resumable session's outbox, full of sent
    and unsent results, holds at most RESUME_BYTES whatever characters its frames have
    (a str with one emoji is 4 bytes a character)."""

    def result(index: int) -> str:
        frame = {"mode": "2pass-online", "text": "识别结果" * 3, "wav_name": wav_name}
        return json.dumps({**frame, "is_final": False, "i": index}, ensure_ascii=False)

    frames = [result(index) for index in range(20_000)]  # made before measuring
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        outbox = Outbox()
        outbox.number_from_now()
        for index in range(5_000):  # sent, kept for a resume: far more than it keeps
            await outbox.put(frames[index])
            outbox.sent(index + 1)
        index = 5_000
        while True:  # unsent, until the writer would wait
            with anyio.move_on_after(0.01) as waited:
                await outbox.put(frames[index])
            if waited.cancelled_caught:
                break
            index += 1
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index > 5_150  # hundreds of frames unsent: the bound, not one frame, is measured
    assert RESUME_BYTES * 0.6 < held <= RESUME_BYTES * 1.02, held
