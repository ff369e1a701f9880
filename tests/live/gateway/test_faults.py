"""Fault injection against a real uvicorn with real workers (RELIABILITY.md lists each).

A worker killed or hung mid-stream, clients that vanish at random points, twice as many
clients as places: what each session sees, and what the server has left afterwards. How
soon each is seen, and the server's memory meanwhile, are measured by ``bench.reliability.faults``.
"""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from bench.common.gateway import Gateway, serve
from tests.helpers.checksums import END, check_online, config, random_frames
from tests.helpers.loops import UVICORN_LOOPS
from tests.helpers.timing import within
from tests.helpers.uvicorn_session import open_session, receive_until_final, send_frames

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHUNK = 19200  # one 600 ms chunk of the default config


async def readyz(server: Gateway) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
        body: dict[str, Any] = (await http.get("/readyz")).json()
        return body


async def wait_until_all_released(server: Gateway, slots: int = 64) -> dict[str, Any]:
    """Poll /readyz until no session, stream, slot or worker-side state is held."""
    with within(15):
        while True:
            status = await readyz(server)
            if status["sessions"]["active"] == 0 and all(
                w["state"] == "ready"
                and w["active_streams"] == 0
                and w["free_slots"] == slots
                and w["engine_streams"] == 0
                for w in status["workers"]
            ):
                return status
            await anyio.sleep(0.2)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Outcome:
    def __init__(self) -> None:
        self.worker: int | None = None
        self.verified = False
        self.error: dict[str, Any] | None = None
        self.close_code: int | None = None


async def stream_through_a_fault(
    server: Gateway, index: int, started: anyio.Event, fault_done: anyio.Event, out: Outcome
) -> None:
    """First chunk, its result (which names the worker), then the rest after the fault."""
    rng = random.Random(index)
    pcm = rng.randbytes(CHUNK * 4 + 1000)
    async with open_session(server) as ws:
        await send_frames(ws, [config(), pcm[:CHUNK]])
        first = json.loads(await ws.recv())
        out.worker = first["worker"]
        started.set()
        await fault_done.wait()
        results = [first]
        try:
            await send_frames(ws, [*random_frames(rng, pcm[CHUNK:], 7000), END])
            while not results[-1].get("is_final"):
                message = json.loads(await ws.recv())
                if message.get("type") == "error":
                    out.error = message
                    break
                results.append(message)
        except ConnectionClosed:
            pass
        if out.error is None and results[-1].get("is_final"):
            check_online(results, pcm, CHUNK)
            out.verified = True
            return
        await read_error(ws, out)


async def read_error(ws: ClientConnection, out: Outcome) -> None:
    try:
        while True:
            message = json.loads(await ws.recv())
            if message.get("type") == "error":
                out.error = message
    except ConnectionClosed as closed:
        out.close_code = closed.rcvd.code if closed.rcvd else None


@pytest.mark.parametrize("fault", ["sigkill", "hang"])
async def test_a_worker_lost_mid_stream_fails_only_its_sessions(tmp_path: Path, fault: str) -> None:
    """SIGKILL: a crash. SIGSTOP: a worker alive but stuck, found by the step watchdog."""
    step_timeout = 1.0
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu,cpu",
        "ASR_WORKER_STEP_TIMEOUT": str(step_timeout),
    }
    async with serve(env, tmp_path / "server.log") as server:
        victim = (await readyz(server))["workers"][0]
        outcomes = [Outcome() for _ in range(6)]
        fault_done = anyio.Event()
        with within(60):
            async with anyio.create_task_group() as group:
                for index, out in enumerate(outcomes):
                    started = anyio.Event()
                    group.start_soon(
                        stream_through_a_fault, server, index, started, fault_done, out
                    )
                    await started.wait()  # one by one: least-loaded alternates the workers
                os.kill(victim["pid"], signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)
                fault_done.set()
        victims = [o for o in outcomes if o.worker == victim["index"]]
        survivors = [o for o in outcomes if o.worker != victim["index"]]
        assert len(victims) == len(survivors) == 3
        assert all(o.verified for o in survivors)
        # A crash is seen as the worker's exit (its pipe's EOF), not by the watchdog; a hang
        # by the watchdog, after the step timeout set here.
        watchdog = f"ASR_WORKER_STEP_TIMEOUT {step_timeout:g} s"
        seen_as = "died (exit code -9)" if fault == "sigkill" else watchdog
        for out in victims:
            assert not out.verified
            assert out.error is not None
            assert out.error["code"] == 1011
            assert out.close_code == 1011
            assert seen_as in out.error["message"], out.error["message"]
        status = await wait_until_all_released(server)
        replaced = status["workers"][0]
        assert replaced["restarts"] == 1
        assert replaced["pid"] != victim["pid"]
        # And the seat serves again.
        async with open_session(server) as ws:
            pcm = bytes(CHUNK)
            await send_frames(ws, [config(), pcm, END])
            check_online(await receive_until_final(ws), pcm, CHUNK)


async def drop_at_a_random_point(server: Gateway, rng: random.Random) -> None:
    """Send part of an utterance (sometimes all of it, sometimes only the config), then cut
    the TCP connection without a close frame, as a crashed client or a lost network does."""
    pcm = rng.randbytes(CHUNK * rng.randint(1, 6))
    frames: list[str | bytes] = [config(), *random_frames(rng, pcm, 8000), END]
    async with open_session(server) as ws:
        await send_frames(ws, frames[: rng.randint(0, len(frames))])
        if rng.random() < 0.5:
            await anyio.sleep(rng.uniform(0, 0.3))  # let some results be in flight
        assert ws.transport is not None
        ws.transport.abort()


@UVICORN_LOOPS
async def test_dropped_connections_release_every_resource(
    tmp_path: Path, uvicorn_loop: str
) -> None:
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu"}
    loop = ("--loop", uvicorn_loop)
    async with serve(env, tmp_path / "server.log", options=loop) as server:
        rng = random.Random(11)
        with within(60):
            async with anyio.create_task_group() as group:
                for _ in range(40):
                    group.start_soon(drop_at_a_random_point, server, random.Random(rng.random()))
        status = await wait_until_all_released(server)
        assert all(w["restarts"] == 0 for w in status["workers"])
        async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
            metrics = (await http.get("/metrics")).text
        assert "asr_sessions_total 40.0" in metrics


class Tally:
    """What each client of the overload test saw; ``all_refused`` once ``expected`` were."""

    def __init__(self, expected_refusals: int) -> None:
        self.results: dict[int, Any] = {}
        self.expected_refusals = expected_refusals
        self.all_refused = anyio.Event()

    def record(self, index: int, result: Any) -> None:
        self.results[index] = result
        refused = sum(1 for r in self.results.values() if r[0] == "refused")
        if refused >= self.expected_refusals:
            self.all_refused.set()


async def admitted_or_refused(server: Gateway, index: int, hold: anyio.Event, tally: Tally) -> None:
    pcm = random.Random(index).randbytes(CHUNK * 2)
    async with open_session(server) as ws:
        try:
            await send_frames(ws, [config(), pcm[:CHUNK]])
        except ConnectionClosed:
            pass  # refused before we could send; the error frame is still there to read
        first = json.loads(await ws.recv())
        if first.get("type") == "error":
            out = Outcome()
            out.error = first
            await read_error(ws, out)
            tally.record(index, ("refused", out.error["code"], out.error["message"]))
            return
        await hold.wait()  # every admitted session stays open until all clients have tried
        await send_frames(ws, [pcm[CHUNK:], END])
        check_online([first, *await receive_until_final(ws)], pcm, CHUNK)
        tally.record(index, ("verified",))


async def test_twice_max_sessions_at_once(tmp_path: Path) -> None:
    places = 32
    env = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu", "ASR_MAX_SESSIONS": str(places)}
    async with serve(env, tmp_path / "server.log") as server:
        rss_before = rss_kib(server.pid)
        tally = Tally(expected_refusals=places)
        hold = anyio.Event()
        with within(60):
            async with anyio.create_task_group() as group:
                for index in range(2 * places):
                    group.start_soon(admitted_or_refused, server, index, hold, tally)
                # Refused while every admitted session is held open: none waited for a
                # place to come free.
                await tally.all_refused.wait()
                rss_peak = rss_kib(server.pid)
                hold.set()
        results = tally.results
        verified = [r for r in results.values() if r[0] == "verified"]
        refused = [r for r in results.values() if r[0] == "refused"]
        assert len(verified) == len(refused) == places
        assert all(code == 1013 for _, code, _ in refused)
        # Refused at once (ASR_ADMISSION_WAIT is 0), not after waiting in line.
        at_once = f"the server is serving its maximum of {places} sessions; try again later"
        assert all(message == at_once for _, _, message in refused), refused[:1]
        # Bounded memory: refused sessions hold nothing; 32 admitted ones hold a little
        # (3 MiB, bench.reliability.faults). A guard against holding what is not bounded, not
        # a figure.
        growth_mib = (rss_peak - rss_before) / 1024
        assert growth_mib < 64, growth_mib
        await wait_until_all_released(server)
