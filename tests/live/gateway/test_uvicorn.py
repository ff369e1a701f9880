"""Against a real uvicorn on a free port, with the ``websockets`` client and real workers."""

from __future__ import annotations

import json
import os
import random
import sys
import wave
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from websockets.asyncio.client import ClientConnection

from bench.common import ROOT
from bench.common.gateway import GATEWAY, UVICORN, Gateway, serve
from gateway.client import transcribe
from tests.helpers.checksums import (
    END,
    check_offline,
    check_online,
    checksum,
    config,
    random_frames,
)
from tests.helpers.timing import within
from tests.helpers.uvicorn_session import (
    expect_close,
    failed_start,
    open_session,
    receive_until_final,
    send_frames,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CHECKSUM_ENV = {"ASR_MODEL": "checksum", "ASR_DEVICES": "cpu,cpu"}


def process_exists(pid: int) -> bool:
    """Whether ``pid`` is alive or a zombie (an exited child nobody reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def leftover_segments(pid: int) -> list[str]:
    return [name for name in os.listdir("/dev/shm") if name.startswith(f"asrgw_{pid}_")]


async def one_session(server: Gateway, index: int) -> None:
    """One or two utterances, online or offline, in random frames; every result checked."""
    rng = random.Random(index)
    async with open_session(server) as ws:
        assert ws.subprotocol == "binary"
        for _ in range(rng.choice((1, 2))):
            mode = "offline" if rng.random() < 0.25 else "online"
            units = rng.choice((1, 5, 10, 16))
            pcm = rng.randbytes(2 * rng.randint(4000, 40_000))
            frames: list[str | bytes] = [
                config(mode=mode, chunk_size=[0, units, 5], wav_name=f"s{index}"),
                *random_frames(rng, pcm, rng.choice((101, 999, 8000))),
                END,
            ]
            results: list[dict[str, Any]] = []

            async def collect(ws: ClientConnection = ws, into: list[Any] = results) -> None:
                into.extend(await receive_until_final(ws))

            # Sending and reading at once: results must not wait for the last frame.
            async with anyio.create_task_group() as group:
                group.start_soon(collect)
                await send_frames(ws, frames)
            if mode == "online":
                check_online(results, pcm, units * 1920)
            else:
                check_offline(results, pcm)
            assert {message["wav_name"] for message in results} == {f"s{index}"}


async def test_twenty_concurrent_sessions_get_every_checksum_right(tmp_path: Path) -> None:
    # Frames down to 1 byte, unpaced: far over ASR_MAX_FRAMES_PER_SECOND, which is not
    # what this test is about (tests/gateway/test_abuse*.py are).
    env = {**CHECKSUM_ENV, "ASR_MAX_FRAMES_PER_SECOND": "1e9"}
    async with serve(env, tmp_path / "server.log") as server:
        with within(60):
            async with anyio.create_task_group() as group:
                for index in range(20):
                    group.start_soon(one_session, server, index)
        async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
            metrics = (await http.get("/metrics")).text
        await check_the_client(server)
    assert "asr_sessions_total 20.0" in metrics
    assert 'asr_utterances_total{mode="offline"}' in metrics  # both modes were exercised
    for worker in ("0", "1"):  # both workers took streams
        assert f'asr_chunks_total{{model="checksum",worker="{worker}"}}' in metrics
    assert not leftover_segments(server.pid)


@pytest.mark.parametrize("entry", [UVICORN, GATEWAY], ids=["uvicorn", "python-m-gateway"])
@pytest.mark.parametrize("whole_group", [False, True], ids=["server", "process-group"])
async def test_sigterm_lets_live_sessions_finish_then_exits_0(
    tmp_path: Path, whole_group: bool, entry: Sequence[str]
) -> None:
    env = {**CHECKSUM_ENV, "ASR_DRAIN_TIMEOUT": "4"}
    rng = random.Random(5)
    pcms = [rng.randbytes(2 * 30_000) for _ in range(4)]
    async with serve(env, tmp_path / "server.log", entry=entry) as server:
        with within(60):
            async with (
                open_session(server) as idle,
                open_session(server) as stalled,
                open_session(server) as s0,
                open_session(server) as s1,
                open_session(server) as s2,
                open_session(server) as s3,
            ):
                live = [s0, s1, s2, s3]
                # Every session but one mid-utterance, its first partial result received.
                firsts = []
                for ws, pcm in zip([stalled, *live], [bytes(19200), *pcms], strict=True):
                    await send_frames(ws, [config(chunk_size=[0, 10, 5]), pcm[:19200]])
                    firsts.append(json.loads(await ws.recv()))
                async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
                    workers = (await http.get("/readyz")).json()["workers"]
                if whole_group:  # the workers get it too, and must not die of it
                    server.terminate_group()
                else:
                    server.terminate()
                # A session between utterances is closed as soon as the drain starts ...
                await expect_close(idle, 1012)
                # ... the server says it is not ready, and refuses new sessions.
                async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
                    response = await http.get("/readyz")
                assert response.status_code == 503
                assert response.json()["draining"] is True
                async with open_session(server) as late:
                    assert "shutting down" in (await expect_close(late, 1012))["message"]
                # The live sessions finish their utterance and get every result ...
                for ws, pcm in zip(live, pcms, strict=True):
                    await send_frames(ws, [*random_frames(rng, pcm[19200:], 5000), END])
                for ws, pcm, first in zip(live, pcms, firsts[1:], strict=True):
                    check_online([first, *await receive_until_final(ws)], pcm, 19200)
                    # ... then the close that sends them elsewhere for the next one.
                    await expect_close(ws, 1012)
                # The stalled one is closed when the drain timeout passes.
                assert "drain timeout" in (await expect_close(stalled, 1012))["message"]
            assert await server.exited() == 0
    assert not leftover_segments(server.pid)
    for worker in workers:  # stopped and reaped by the server: gone, not zombies
        assert not process_exists(worker["pid"])


async def check_the_client(server: Gateway) -> None:
    """``gateway.client`` paces audio in real time and reports the server's refusals."""
    pcm = random.Random(9).randbytes(2 * 8000)  # 0.5 s
    started = anyio.current_time()
    with within(30):
        transcript = await transcribe(server.url, pcm, chunk_size=(0, 5, 5))
    assert anyio.current_time() - started >= 0.5 - 0.06  # the last frame goes at 0.44 s
    check_online(transcript.messages, pcm, 9600)
    two_pass = await transcribe(server.url, pcm, mode="2pass", realtime=False)
    assert two_pass.text == checksum(pcm)  # one sentence: no silence in it
    assert two_pass.messages[-1]["mode"] == "2pass-offline"


def write_wav(path: Path, seconds: float) -> None:
    rng = np.random.default_rng(0)
    t = np.arange(int(16000 * seconds)) / 16000
    tone = 3000 * np.sin(2 * np.pi * 220 * t) + 800 * rng.standard_normal(t.size)
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes(tone.astype("<i2").tobytes())


async def test_the_tiny_paraformer_end_to_end_with_the_client(
    tmp_path: Path, tiny_streaming_model: Path
) -> None:
    env = {"ASR_MODEL": str(tiny_streaming_model), "ASR_DEVICES": "cpu"}
    wav = tmp_path / "tone.wav"
    write_wav(wav, 3.0)
    async with serve(env, tmp_path / "server.log") as server:
        command = [sys.executable, "-m", "gateway.client", str(wav), "--url", server.url]
        with within(120):
            online = await anyio.run_process([*command, "--fast", "--json"], cwd=ROOT)
            offline = await anyio.run_process(
                [*command, "--fast", "--json", "--mode", "offline"], cwd=ROOT
            )
    results = [json.loads(line) for line in online.stdout.decode().splitlines()]
    assert results[-1]["is_final"] is True
    assert [m["is_final"] for m in results[:-1]] == [False] * (len(results) - 1)
    assert {m["mode"] for m in results} == {"online"}
    assert "".join(m["text"] for m in results)  # random weights, but some text
    (final,) = [json.loads(line) for line in offline.stdout.decode().splitlines()]
    assert final["mode"] == "offline"
    assert final["is_final"] is True
    assert final["text"]


async def test_a_model_that_cannot_load_fails_start_up_in_one_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    env = {**os.environ, "ASR_MODEL": "/nonexistent/model"}
    returncode, output = await failed_start(env, 60)
    log.write_text(output)
    assert returncode != 0
    assert "ASR_MODEL=/nonexistent/model: no such directory" in output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("models", "message"),
    [
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\ndevices = ["cuda:7"]\n',
            "[models.zh] devices: cuda:7 does not exist",
        ),
        (
            'default = "zh"\n[models.zh]\nmodel = "checksum"\n[models.en]\nmodel = "/nope"\n',
            "[models.en] ASR_MODEL=/nope: no such directory",
        ),
    ],
)
async def test_a_bad_models_file_fails_start_up_in_one_line_naming_the_entry(
    tmp_path: Path, models: str, message: str
) -> None:
    path = tmp_path / "models.toml"
    path.write_text(models)
    env = {**os.environ, "ASR_MODELS": str(path)}
    env.pop("ASR_MODEL", None)
    returncode, output = await failed_start(env, 60)
    assert returncode == 3  # uvicorn's: the lifespan's start-up failed
    (line,) = [line for line in output.splitlines() if message in line]
    assert "Traceback" not in output
    assert line.count("[models.") == 1
