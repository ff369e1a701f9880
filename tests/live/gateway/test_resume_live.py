"""Resumable sessions against a real uvicorn, through a TCP proxy of ours that cuts the
connection where each test says (``tests.helpers.cutting_proxy``).

The proof is exactness: with the checksum engine every result is ``<samples>:<crc32>`` of
all the audio the stream has had, so a session cut several times must give the very results
of an uncut run, in order, each once. A sample lost, taken twice or out of order changes
every checksum after it. The tiny Paraformer must give the uncut run's text too: its
decoder state never left the worker.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from bench.common.cutting_proxy import Cut, cutting_proxy, random_cuts
from bench.common.gateway import Gateway, serve
from gateway.client import Transcript, transcribe
from tests.helpers.checksums import END, checksum, config
from tests.helpers.resumes import (
    FRAME_BYTES,
    KEY_A,
    KEY_B,
    drop,
    metric,
    open_resumable,
    refused,
    results_up_to,
    resume,
    until_acknowledged,
    until_metric,
)
from tests.helpers.timing import within

pytestmark = pytest.mark.anyio

REPLICA = "replica-a"
ENV = {
    "ASR_MODEL": "checksum",
    "ASR_DEVICES": "cpu",
    "ASR_API_KEYS": f"{KEY_A},{KEY_B}",
    "ASR_REPLICA_ID": REPLICA,
}
RATE = 16_000


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("resume")


@pytest.fixture(scope="module")
async def server(log_dir: Path) -> AsyncIterator[Gateway]:
    """One server for the tests of ``ENV`` as it is: each leaves it idle (no session, none
    parked) for the next."""
    async with serve(ENV, log_dir / "server.log") as server:
        yield server
        await until_metric(server, "asr_sessions_parked", 0)


def _pcm(seconds: float, seed: int) -> bytes:
    return random.Random(seed).randbytes(2 * int(RATE * seconds))


def _results(transcript: Transcript) -> list[tuple[object, object, object]]:
    """What a run's results say, without the fields that differ between runs."""
    return [(m.get("mode"), m.get("text"), m.get("is_final")) for m in transcript.messages]


async def _through(
    server: Gateway,
    plan: Sequence[Cut | None],
    pcm: bytes,
    *,
    sessions: list[Mapping[str, Any]] | None = None,
    realtime: bool = False,
) -> tuple[Transcript, int]:
    """``pcm`` by gateway.client (resumable) through a proxy that cuts as ``plan`` says; the
    transcript and the number of connections it took."""
    async with cutting_proxy(server.port, plan) as proxy:
        transcript = await transcribe(
            proxy.url,
            pcm,
            api_key=KEY_A,
            resumable=True,
            realtime=realtime,
            on_session=None if sessions is None else sessions.append,
        )
        return transcript, len(proxy.connections)


# -- exact transcripts across cuts ------------------------------------------------------


async def test_random_cuts_several_per_session_give_the_uncut_results(server: Gateway) -> None:
    """Three sessions, each cut three times at random byte offsets of the audio it sends
    (each cut lands inside a WebSocket frame unless it hits one of its 1,928-byte
    boundaries exactly), by TCP reset or FIN: every result of the uncut run, once, in
    order, and the final checksum of exactly the audio sent."""
    for seed in range(3):
        pcm = _pcm(4.0, seed)
        uncut, _ = await _through(server, [], pcm)
        sessions: list[Mapping[str, Any]] = []
        plan = random_cuts(seed, 3, up_range=(8_000, 60_000), how="either")
        cut, connections = await _through(server, plan, pcm, sessions=sessions)
        assert connections == 4, plan
        assert cut.resumes == 3
        assert [s["resumed"] for s in sessions] == [False, True, True, True]
        assert _results(cut) == _results(uncut)
        assert cut.messages[-1]["text"] == checksum(pcm)
        ids = [int(str(m["result_id"])) for m in cut.messages]
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)


async def test_cut_while_results_are_queued_then_during_the_final_flush(server: Gateway) -> None:
    """The first connection reads nothing back (its results queue in the server) and is
    cut mid-audio; the second takes the rest of the audio and the end, reads nothing back
    either, and is cut while the final results are waiting: the third gets them all."""
    pcm = _pcm(3.0, 7)
    # Held once the client sends audio: it waits for its session frame first.
    held = Cut(up_bytes=40_000, hold_down=True, hold_down_after_up=2_000)
    # 2 s: the whole of the audio left and the end are sent long before (fast client).
    flushing = Cut(after_s=2.0, hold_down=True, hold_down_after_up=1_000)
    uncut, _ = await _through(server, [], pcm)
    sessions: list[Mapping[str, Any]] = []
    cut, connections = await _through(server, [held, flushing], pcm, sessions=sessions)
    assert connections == 3
    assert _results(cut) == _results(uncut)
    _first, second, third = sessions
    assert not second["input_ended"]
    assert 0 < second["samples"] < len(pcm) // 2
    # The final flush: the server had taken everything, end included, when it was cut.
    assert third["input_ended"]
    assert third["samples"] == len(pcm) // 2
    # Nothing reached the client on the held connections: every result came on the third.
    assert third["last_result"] == cut.messages[-1]["result_id"]
    assert cut.duplicates == 0


async def test_a_session_cut_twice_with_the_tiny_paraformer(
    log_dir: Path, tiny_streaming_model: Path
) -> None:
    """A real model: the decoder state stays in the worker while the session is parked,
    so the text of a session cut twice equals the uncut run's."""
    env = {"ASR_MODEL": str(tiny_streaming_model)}
    pcm = _pcm(3.0, 11)  # noise: the random-weight model still gives deterministic tokens
    async with serve({**ENV, **env}, log_dir / "paraformer.log") as server:
        uncut, _ = await _through(server, [], pcm)
        plan = [Cut(up_bytes=30_000), Cut(up_bytes=25_000)]
        cut, connections = await _through(server, plan, pcm)
    assert connections == 3
    assert cut.resumes == 2
    assert cut.text == uncut.text
    assert _results(cut) == _results(uncut)


# -- misuse and limits -------------------------------------------------------------------


async def test_misused_tokens_are_refused_each_with_its_code(server: Gateway) -> None:
    url = server.url
    reused = await metric(server, 'asr_resumes_total{outcome="reused"}')
    served = await metric(server, 'asr_resumes_total{outcome="resumed"}')
    websocket, session = await open_resumable(url)
    await results_up_to(websocket, 2)
    token = session["resume_token"]
    drop(websocket)

    # Not a token of ours: malformed, forged, or another replica's.
    assert await refused(url, "not-a-token") == 4400
    replica, session_id, generation, mac = token.split(".")
    forged = f"{replica}.{session_id}.{generation}.{'A' * len(mac)}"
    assert await refused(url, forged) == 4400
    elsewhere = f"replica-b.{session_id}.{generation}.{mac}"
    websocket, frame = await resume(url, elsewhere)
    assert frame["code"] == 4421
    assert "replica-b" in frame["message"]
    await websocket.close()
    # Another API key, and results the server never issued: refused, and neither uses
    # up the token.
    assert await refused(url, token, key=KEY_B) == 4403
    assert await refused(url, token, last_result=99) == 4410

    resumed, frame = await resume(url, token, last_result=2)
    assert frame["resumed"]
    assert frame["last_result"] == 2
    await resumed.send(bytes(2 * FRAME_BYTES))  # the client has read its new token
    # The used token again: refused (4409), and the live connection is untouched.
    assert await refused(url, token, last_result=2) == 4409
    await resumed.send(END)
    (final,) = await results_up_to(resumed, 1)
    assert final["is_final"]
    assert final["text"] == checksum(bytes(2 * FRAME_BYTES * 11))
    await resumed.close()
    # The server is shared: its counts went up by these alone.
    assert await metric(server, 'asr_resumes_total{outcome="reused"}') == reused + 1
    assert await metric(server, 'asr_resumes_total{outcome="resumed"}') == served + 1


async def test_a_resume_whose_answer_was_lost_may_use_its_token_again(server: Gateway) -> None:
    """A resume's session frame (with the next token) lost with its connection: the token
    it used still works, once, for as long as the client cannot have read the next one."""
    websocket, session = await open_resumable(server.url)
    await results_up_to(websocket, 2)
    drop(websocket)
    lost, frame = await resume(server.url, session["resume_token"], last_result=2)
    drop(lost)  # as if its session frame had never arrived
    again, frame_again = await resume(server.url, session["resume_token"], last_result=2)
    assert frame_again["resumed"]
    assert frame_again["resume_token"] == frame["resume_token"]
    await again.send(END)
    assert [m["is_final"] for m in await results_up_to(again, 1)] == [True]
    await again.close()


async def test_a_session_not_resumed_within_its_window_is_closed(log_dir: Path) -> None:
    env = {"ASR_RESUME_WINDOW": "0.5", "ASR_MAX_SESSIONS": "1"}
    async with serve({**ENV, **env}, log_dir / "window.log") as server:
        websocket, session = await open_resumable(server.url)
        await results_up_to(websocket, 2)
        drop(websocket)
        # Parked, it holds the one place: a new session is refused.
        await until_metric(server, "asr_sessions_parked", 1)
        full = await connect(server.url, additional_headers={"Authorization": f"Bearer {KEY_A}"})
        assert json.loads(await full.recv())["code"] == 1013
        await until_metric(server, "asr_sessions_parked", 0)  # the window has passed
        assert await refused(server.url, session["resume_token"], last_result=2) == 4404
        assert await metric(server, "asr_sessions_parked") == 0
        await until_metric(server, "asr_sessions_active", 0)


async def test_parking_is_bounded(log_dir: Path) -> None:
    """ASR_MAX_PARKED_SESSIONS=1: the second session dropped ends at once, the first
    waits for its resume."""
    env = {"ASR_MAX_PARKED_SESSIONS": "1"}
    async with serve({**ENV, **env}, log_dir / "parking.log") as server:
        first, first_session = await open_resumable(server.url)
        second, second_session = await open_resumable(server.url)
        await results_up_to(first, 2)
        await results_up_to(second, 2)
        drop(first)
        await until_metric(server, "asr_sessions_parked", 1)
        drop(second)
        await until_metric(server, "asr_parking_refused_total", 1)
        assert await refused(server.url, second_session["resume_token"], 2) == 4404
        resumed, frame = await resume(server.url, first_session["resume_token"], 2)
        assert frame["resumed"]
        await resumed.close()


async def test_a_resume_as_the_first_frame(server: Gateway) -> None:
    """``{"resume": TOKEN, "last_result": K}`` as a connection's first frame, for clients
    that would rather not put the token in the URL (proxies log URLs)."""
    websocket, session = await open_resumable(server.url)
    results = await results_up_to(websocket, 2)
    drop(websocket)
    resumed = await connect(server.url, additional_headers={"Authorization": f"Bearer {KEY_A}"})
    await resumed.send(json.dumps({"resume": session["resume_token"], "last_result": 1}))
    frame = json.loads(await resumed.recv())
    assert frame["resumed"]
    assert frame["samples"] == FRAME_BYTES * 10
    # The result after 1 comes again; the client did not have it.
    assert (await results_up_to(resumed, 1))[0]["text"] == results[1]["text"]
    await resumed.close()


async def test_a_session_parked_when_the_drain_starts_can_still_resume_for_its_results(
    log_dir: Path,
) -> None:
    """SIGTERM while a session is parked mid-utterance: a resume within the drain timeout
    is served (its final result, exact), then closed with 1012 as a live session is."""
    async with serve({**ENV, "ASR_DRAIN_TIMEOUT": "10"}, log_dir / "drain.log") as server:
        websocket, session = await open_resumable(server.url)
        await results_up_to(websocket, 2)
        drop(websocket)
        await until_metric(server, "asr_sessions_parked", 1)
        server.terminate()
        with within(5):
            while server.ready():  # noqa: ASYNC110 (another process): until the drain begins
                await anyio.sleep(0.02)
        resumed, frame = await resume(server.url, session["resume_token"], last_result=2)
        assert frame["resumed"]
        assert not frame["input_ended"]
        await resumed.send(END)
        (final,) = await results_up_to(resumed, 1)
        assert final["text"] == checksum(bytes(2 * FRAME_BYTES * 10))
        error = json.loads(await resumed.recv())
        assert error["code"] == 1012
        assert await server.exited() == 0


async def test_a_parked_offline_utterance_keeps_its_audio_in_the_budget(server: Gateway) -> None:
    """The audio an offline utterance buffers stays held (and counted) while its session is
    parked, and is decoded whole once the resumed client ends it."""
    websocket = await connect(server.url, additional_headers={"Authorization": f"Bearer {KEY_A}"})
    await websocket.send(config(mode="offline", resumable=True))
    session = json.loads(await websocket.recv())
    await websocket.send(bytes(2 * FRAME_BYTES * 10))
    with within(5):
        while json.loads(await websocket.recv()).get("samples") != FRAME_BYTES * 10:
            pass  # until the ack says the server has it all
    drop(websocket)
    await until_metric(server, "asr_sessions_parked", 1)
    assert await metric(server, "asr_buffered_audio_seconds") == 1.2
    resumed, frame = await resume(server.url, session["resume_token"])
    assert frame["samples"] == FRAME_BYTES * 10
    await resumed.send(END)
    (final,) = await results_up_to(resumed, 1)
    assert final["text"] == checksum(bytes(2 * FRAME_BYTES * 10))
    await resumed.close()
    await until_metric(server, "asr_buffered_audio_seconds", 0)


def _masked_frame(payload: bytes) -> bytes:
    """A client's binary WebSocket frame (RFC 6455: masked), as bytes on the wire."""
    mask = bytes([1, 2, 3, 4])
    assert 126 <= len(payload) < 1 << 16
    header = bytes([0x82, 0x80 | 126]) + len(payload).to_bytes(2, "big") + mask
    return header + bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))


async def test_a_cut_in_the_middle_of_a_frame_and_of_a_sample(server: Gateway) -> None:
    """The connection dies with half a WebSocket frame on the wire, after a frame that
    ended in the middle of a sample: the server took the whole samples before both, says
    so, and the audio resent from there makes the exact checksum."""
    pcm = _pcm(2.0, 5)
    websocket = await connect(server.url, additional_headers={"Authorization": f"Bearer {KEY_A}"})
    await websocket.send(config(resumable=True))
    session = json.loads(await websocket.recv())
    await websocket.send(pcm[:19_200])
    await websocket.send(pcm[19_200:20_201])  # ends with the first byte of a sample
    await results_up_to(websocket, 1)
    half = _masked_frame(pcm[20_201:24_201])
    websocket.transport.write(half[: len(half) // 2])
    await until_acknowledged(websocket)  # in the server's socket; no frame of ours says so
    drop(websocket)
    resumed, frame = await resume(server.url, session["resume_token"], last_result=1)
    assert frame["samples"] == 20_201 // 2  # not the odd byte, not the half frame
    await resumed.send(pcm[2 * frame["samples"] :])
    await resumed.send(END)
    results = await results_up_to(resumed, 3)  # the 2nd and 3rd chunks', the final
    assert [r["is_final"] for r in results] == [False, False, True]
    assert results[-1]["text"] == checksum(pcm)
    await resumed.close()
