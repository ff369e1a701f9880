"""Two classes of offline work, through the gateway with real workers: with the offline pool
niced (ASR_OFFLINE_NICE), its first worker stays at nice 0 (ASR_OFFLINE_URGENT_WORKERS) and
decodes each 2pass utterance's last sentence, whose result is the final; the niced ones
decode the sentences before it and offline-mode utterances. The frames say which worker
decoded each (``worker``); ``/proc`` says at what nice value each runs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from tests.helpers.checksums import END, config
from tests.helpers.loops import GatewayClient

pytestmark = pytest.mark.slow

NICE = 5


@pytest.fixture(scope="module")
def client(tiny_offline_model: Path) -> Iterator[TestClient]:
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(
        streaming,
        model=str(tiny_offline_model),
        kind=Role.OFFLINE,
        devices=("cpu", "cpu"),
        worker_nice=NICE,
    )
    settings = GatewaySettings(
        pool=streaming, companions={Role.OFFLINE: offline}, idle_timeout_s=30.0
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


def niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])


def sentences(count: int) -> bytes:
    """``count`` stretches of loud noise, each followed by a second of silence (which ends a
    2pass sentence) but the last."""
    rng = np.random.default_rng(count)
    loud = [rng.integers(-12000, 12000, 16000, dtype=np.int16) for _ in range(count)]
    quiet = np.zeros(16000, np.int16)
    parts = [part for sound in loud for part in (sound, quiet)][:-1]
    return np.concatenate(parts).astype("<i2").tobytes()


def results(client: TestClient, mode: str, pcm: bytes) -> list[dict[str, object]]:
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode=mode))
        for start in range(0, len(pcm), 1920):
            ws.send_bytes(pcm[start : start + 1920])
        ws.send_text(END)
        messages: list[dict[str, object]] = []
        while not messages or not messages[-1]["is_final"]:
            messages.append(ws.receive_json())
    return messages


def test_the_first_offline_worker_runs_at_nice_0_the_others_niced(client: TestClient) -> None:
    own = os.nice(0)
    workers = client.get("/readyz").json()["offline_workers"]
    assert [(w["nice"], w["urgent"]) for w in workers] == [(0, True), (NICE, False)]
    assert [niceness(w["pid"]) for w in workers] == [own, own + NICE]
    (streaming,) = client.get("/readyz").json()["workers"]
    assert (streaming["nice"], streaming["urgent"], niceness(streaming["pid"])) == (0, False, own)


def test_a_2pass_utterances_last_sentence_is_decoded_at_nice_0_the_others_niced(
    client: TestClient,
) -> None:
    messages = results(client, "2pass", sentences(3))
    offline = [m for m in messages if m["mode"] == "2pass-offline"]
    assert [m["is_final"] for m in offline] == [False, False, True]
    assert [m["worker"] for m in offline] == [1, 1, 0]


def test_a_one_sentence_utterance_is_its_own_final_and_urgent(client: TestClient) -> None:
    messages = results(client, "2pass", sentences(1))
    (offline,) = [m for m in messages if m["mode"] == "2pass-offline"]
    assert (offline["is_final"], offline["worker"]) == (True, 0)


def test_an_offline_mode_utterance_waits_behind_the_streams_niced(client: TestClient) -> None:
    (result,) = results(client, "offline", sentences(1))
    assert (result["mode"], result["worker"]) == ("offline", 1)
