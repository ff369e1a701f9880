"""What one client can make a resumable session cost, against a real uvicorn with checksum
workers: an old token replayed, resumes in a storm, the parking places taken by one
client, a client that stops reading, and the resumes counted as they are served.

One server for the module: every test leaves no session behind it.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection

from bench.common.cutting_proxy import Cut, cutting_proxy
from bench.common.gateway import Gateway, serve
from gateway.client import transcribe
from tests.helpers.checksums import END, checksum, config
from tests.helpers.raw_websocket import BINARY, TEXT, RawClient, frame
from tests.helpers.resumes import (
    drop,
    metric,
    open_resumable,
    refusal,
    refused,
    results_up_to,
    resume,
    until_metric,
)
from tests.helpers.timing import within

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ENV = {
    "ASR_MODEL": "checksum",
    "ASR_DEVICES": "cpu",
    "ASR_REPLICA_ID": "replica-a",
    "ASR_SEND_TIMEOUT": "1",
    "ASR_RESUME_WINDOW": "10",
    "ASR_MAX_PARKED_SESSIONS": "4",
    "ASR_MAX_PARKED_PER_CLIENT": "2",
    "ASR_MAX_RESUMES_PER_MINUTE": "30",  # one every 2 s, after a burst of 5
}
SERVER_SEND_BUFFER = 16384  # bytes (the kernel doubles it): a reader that stops blocks soon
ONE_RESULT = bytes(2 * 1920 * 10)  # what open_resumable sends: two results of 600 ms


@pytest.fixture(scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    log = tmp_path_factory.mktemp("resume-abuse") / "server.log"
    async with serve(ENV, log, send_buffer=SERVER_SEND_BUFFER) as server:
        yield server


async def _finish(websocket: ClientConnection, audio: bytes) -> None:
    """End the utterance, check its final checksum, and close: the session is gone."""
    await websocket.send(END)
    (final,) = await results_up_to(websocket, 1)
    assert final["is_final"]
    assert final["text"] == checksum(audio)
    await websocket.close()


async def _results_until_final(websocket: ClientConnection) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with within(60):
        while not results or not results[-1]["is_final"]:
            results += await results_up_to(websocket, 1)
    return results


# -- tokens ------------------------------------------------------------------------------


async def test_the_previous_token_works_once_however_long_the_client_stays_quiet(
    live: Gateway,
) -> None:
    """An old token from a log: after the resume it served, the previous token's one extra
    use (for a client whose resume's answer was lost) is spent, and a client that then
    sends nothing, as one waiting for its final result does, does not renew it."""
    websocket, session = await open_resumable(live.url)
    await results_up_to(websocket, 2)
    drop(websocket)
    old = session["resume_token"]
    lost, frame = await resume(live.url, old, last_result=2)
    assert frame["resumed"]
    drop(lost)  # its session frame never reached the client, as far as it knows
    again, frame_again = await resume(live.url, old, last_result=2)
    assert frame_again["resume_token"] == frame["resume_token"]
    drop(again)  # silent, then cut again
    for _ in range(3):
        assert await refused(live.url, old, last_result=2) == 4409
    current, frame_current = await resume(live.url, frame["resume_token"], last_result=2)
    assert frame_current["resumed"]
    await _finish(current, ONE_RESULT)


async def test_a_refusal_says_nothing_of_the_sessions_results(live: Gateway) -> None:
    websocket, session = await open_resumable(live.url)
    await results_up_to(websocket, 2)
    drop(websocket)
    answer = await refusal(live.url, session["resume_token"], last_result=99)
    assert answer["code"] == 4410
    assert answer["message"] == "last_result 99 was never issued"  # not the newest, 2
    resumed, _frame = await resume(live.url, session["resume_token"], last_result=2)
    await _finish(resumed, ONE_RESULT)


async def test_resumes_in_a_storm_are_refused_with_4429_and_the_token_works_later(
    live: Gateway,
) -> None:
    """Each resume sends the unacknowledged results again for a few hundred bytes of
    handshake: after a burst of 5, one every 2 s; the refused one uses nothing up."""
    websocket, session = await open_resumable(live.url)
    await results_up_to(websocket, 2)
    drop(websocket)
    token = session["resume_token"]
    for _ in range(5):
        resumed, frame = await resume(live.url, token, last_result=2)
        assert frame["resumed"]
        token = frame["resume_token"]
        drop(resumed)
    answer = await refusal(live.url, token, last_result=2)
    assert answer["code"] == 4429
    assert "ASR_MAX_RESUMES_PER_MINUTE" in answer["message"]
    # One resume every 2 s after the burst: refused until then, each refusal using nothing.
    with within(5):
        while True:
            resumed, frame = await resume(live.url, token, last_result=2)
            if frame.get("code") != 4429:
                break
            await resumed.close()
            await anyio.sleep(0.2)
    assert frame["resumed"]
    await _finish(resumed, ONE_RESULT)
    assert await metric(live, 'asr_resumes_total{outcome="throttled"}') >= 1


async def test_gateway_client_waits_out_a_throttled_resume(live: Gateway) -> None:
    """Six cuts in a row: the sixth resume is refused with 4429, and gateway.client tries
    again with the same token until it is served: the results are the uncut run's."""
    pcm = random.Random(3).randbytes(2 * 16_000 * 3)
    uncut = await transcribe(live.url, pcm, resumable=True)
    async with cutting_proxy(live.port, [Cut(up_bytes=6_000)] * 6) as proxy:
        cut = await transcribe(proxy.url, pcm, resumable=True)
        connections = len(proxy.connections)
    assert cut.resumes == 6
    assert connections > 7  # at least one refused with 4429 on the way
    assert [m["text"] for m in cut.messages] == [m["text"] for m in uncut.messages]
    assert cut.messages[-1]["text"] == checksum(pcm)


async def test_concurrent_replays_of_the_previous_token_are_served_once_and_counted_so(
    live: Gateway,
) -> None:
    """20 connections with the previous token at once: one is served, the others get
    4409, and ``asr_resumes_total{outcome="resumed"}`` counts the one served."""
    websocket, session = await open_resumable(live.url)
    await results_up_to(websocket, 2)
    drop(websocket)
    lost, _frame = await resume(live.url, session["resume_token"], last_result=2)
    drop(lost)
    resumed_before = await metric(live, 'asr_resumes_total{outcome="resumed"}')
    answers: list[tuple[ClientConnection, dict[str, Any]]] = []

    async def replay() -> None:
        answers.append(await resume(live.url, session["resume_token"], last_result=2))

    async with anyio.create_task_group() as group:
        for _ in range(20):
            group.start_soon(replay)
    served = [(ws, answer) for ws, answer in answers if answer["type"] == "session"]
    assert len(served) == 1, [answer for _ws, answer in answers]
    assert all(a["code"] == 4409 for _ws, a in answers if a["type"] == "error")
    await until_metric(live, 'asr_resumes_total{outcome="resumed"}', resumed_before + 1)
    for ws, answer in answers:
        if answer["type"] == "error":
            await ws.close()
    await _finish(served[0][0], ONE_RESULT)


# -- parking -----------------------------------------------------------------------------


async def test_one_client_cannot_take_every_parking_place(live: Gateway) -> None:
    """ASR_MAX_PARKED_PER_CLIENT=2 of 4: a third session of the same address ends at its
    drop, and another address's session still parks."""
    refused_before = await metric(live, "asr_parking_refused_total")
    mine = [await open_resumable(live.url) for _ in range(3)]
    for websocket, _session in mine:
        await results_up_to(websocket, 2)
    for websocket, _session in mine:
        drop(websocket)
    await until_metric(live, "asr_parking_refused_total", refused_before + 1)
    await until_metric(live, "asr_sessions_parked", 2)
    theirs, their_session = await open_resumable(live.url, source="127.0.0.2")
    await results_up_to(theirs, 2)
    drop(theirs)
    await until_metric(live, "asr_sessions_parked", 3)
    codes = []
    for _websocket, session in [*mine, (theirs, their_session)]:
        resumed, frame = await resume(live.url, session["resume_token"], last_result=2)
        codes.append(frame.get("code"))
        if frame["type"] == "session":
            await _finish(resumed, ONE_RESULT)
        else:
            await resumed.close()
    assert sorted(codes, key=str) == [4404, None, None, None]
    assert codes[-1] is None  # the other client's


# -- a client that stops reading -----------------------------------------------------------


def _flood_without_reading(port: int, pattern: bytes) -> tuple[dict[str, Any], int]:
    """A resumable session that reads its session frame, then streams audio without ever
    reading again until the server drops the connection; the session frame and the frames
    sent whole."""
    client = RawClient.connect(port, receive_buffer=4096)
    # One result every 1920 bytes: the results back up long before the audio does.
    # A long name (a file's path, say) makes each result ~400 bytes on the wire, so that
    # the results held for a resume cover what the dropped connection swallowed.
    name = "/recordings/2026/12/02/" + "meeting-room-4-" * 14 + ".wav"
    settings = config(chunk_size=[0, 1, 0], resumable=True, wav_name=name)
    client.send(frame(TEXT, settings.encode()))
    opcode, payload = client.read_frame()
    assert opcode == TEXT
    session: dict[str, Any] = json.loads(payload)
    audio = frame(BINARY, pattern)
    client.sock.settimeout(30.0)
    sent = 0
    try:
        for _ in range(5_000):  # 96 MB at most: a server that takes them all is broken
            client.sock.sendall(audio)
            sent += 1
    except OSError:  # the server gave up on us: reset
        pass
    finally:
        client.close()
    return session, sent


async def test_a_resumable_session_whose_client_stops_reading_parks_and_resumes(
    live: Gateway,
) -> None:
    """After ASR_SEND_TIMEOUT of a blocked send the connection is dropped and the session
    parks at once (its reader does not wait on a backed-up forwarder); a resume gets every
    result from the first, in order, and the final checksum of exactly the audio taken."""
    pattern = bytes(range(256)) * 75  # 19,200 bytes: ten results
    parked_before = await metric(live, "asr_sessions_parked")
    session, sent = await anyio.to_thread.run_sync(_flood_without_reading, live.port, pattern)
    assert sent < 5_000
    with within(10):
        await until_metric(live, "asr_sessions_parked", parked_before + 1)
    resumed, frame = await resume(live.url, session["resume_token"], last_result=0)
    assert frame.get("resumed"), frame
    taken = 2 * frame["samples"]
    assert 0 < taken <= sent * len(pattern)
    audio = (pattern * (taken // len(pattern) + 1))[:taken]
    await resumed.send(END)
    results = await _results_until_final(resumed)
    await resumed.close()
    assert [r["result_id"] for r in results] == list(range(1, len(results) + 1))
    partials = [r["text"] for r in results if not r["is_final"]]
    assert partials == [checksum(audio[: 1920 * k]) for k in range(1, len(partials) + 1)]
    assert results[-1]["text"] == checksum(audio)
