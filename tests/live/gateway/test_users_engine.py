"""A user's own engine, from outside the project's tree (docs/examples/dtmf_engine.py: a
telephone keypad recogniser), served by a real uvicorn through a models-file entry that
names its class by import path: over FunASR's protocol and /v1/transcribe, in the same
spawned workers, with /readyz and the metrics as any model's. An import path that names
nothing, or a class that is no engine, fails the start in one line naming the entry."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import numpy as np
import numpy.typing as npt
import pytest

from bench.common.gateway import Gateway, serve
from tests.helpers.several_models import online_texts, wav_bytes
from tests.helpers.timing import within
from tests.helpers.uvicorn_session import failed_start

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "docs" / "examples"
sys.path.insert(0, str(EXAMPLES))  # the example's constants, as the test's own

from dtmf_engine import COLUMNS, KEYS, RATE, ROWS  # noqa: E402  (after its folder is on the path)

MODELS = """
default = "keypad"

[models.keypad]
model = "dtmf"
engine = "{engine}"
devices = ["cpu", "cpu"]
"""
PRESSED = "0123456789*#ABCD"


def keypad(keys: str, seed: int, on_s: float = 0.08, off_s: float = 0.05) -> npt.NDArray[np.int16]:
    """``keys`` pressed in turn, each a pair of tones, in noise (a phone line's)."""
    rng = np.random.default_rng(seed)
    pieces = []
    for key in keys:
        row = next(r for r, keys_of_row in enumerate(KEYS) if key in keys_of_row)
        times = np.arange(int(on_s * RATE)) / RATE
        tone = np.sin(2 * np.pi * ROWS[row] * times)
        tone += np.sin(2 * np.pi * COLUMNS[KEYS[row].index(key)] * times)
        pieces += [4000 * tone, np.zeros(int(off_s * RATE))]
    audio = np.concatenate(pieces) + rng.normal(0, 200, sum(len(p) for p in pieces))
    return audio.astype(np.int16)


def _env(tmp_path: Path, engine: str) -> dict[str, str]:
    models = tmp_path / "models.toml"
    models.write_text(MODELS.format(engine=engine))
    path = os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])
    return {"ASR_MODELS": str(models), "PYTHONPATH": path}


@pytest.fixture(scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    root = tmp_path_factory.mktemp("users-engine")
    env = {k: v for k, v in os.environ.items() if k != "ASR_MODEL"}
    async with serve({**env, **_env(root, "dtmf_engine:DtmfEngine")}, root / "log") as gateway:
        yield gateway


async def test_its_streams_hear_every_key_over_funasrs_protocol(server: Gateway) -> None:
    async def session(seed: int, heard: list[str]) -> None:
        audio = keypad(PRESSED, seed)
        heard.append("".join(await online_texts(server, None, audio.tobytes())))

    heard: list[str] = []
    with within(60):
        async with anyio.create_task_group() as group:
            for seed in range(4):  # at once, on both workers
                group.start_soon(session, seed, heard)
    assert heard == [PRESSED] * 4


async def test_a_file_is_transcribed_by_it(server: Gateway) -> None:
    files = {"file": ("call.wav", wav_bytes(keypad("555*0123#", 7)), "audio/wav")}
    async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
        answer = await http.post("/v1/transcribe", files=files, timeout=60)
        readyz = (await http.get("/readyz")).json()
        metrics = (await http.get("/metrics")).text
    assert answer.status_code == 200, answer.text
    assert (answer.json()["text"], answer.json()["engine"]) == ("555*0123#", "dtmf")
    assert [worker["engine"] for worker in readyz["workers"]] == ["dtmf", "dtmf"]
    assert 'asr_chunks_total{model="keypad"' in metrics


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ("dtmf_engine:Nope", "module 'dtmf_engine' has no 'Nope'"),
        ("no_such_package.engines:Engine", "cannot import 'no_such_package.engines'"),
        ("dtmf_engine:tone_powers", "tone_powers is not a class"),
        ("dtmf_engine:_Caller", "_Caller has no load, open_stream, feed, close_stream"),
    ],
)
async def test_an_engine_that_is_not_one_fails_the_start_in_one_line(
    tmp_path: Path, engine: str, message: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ASR_MODEL"}
    env.update(_env(tmp_path, engine))
    returncode, output = await failed_start(env, 120)
    assert returncode == 3, output  # uvicorn's: the lifespan's start-up failed
    (line,) = [line for line in output.splitlines() if message in line]
    assert line.count("[models.keypad]") == 1
    assert "Traceback" not in output
