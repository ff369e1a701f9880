"""Routing by model through a real HAProxy and ``deploy/haproxy.cfg`` itself: three replicas
that serve two checksum models, ``checksum`` (the default) and ``en`` (two sessions at most
per replica). Sessions with ``?model=en`` go to the ``routed_model`` backend, which checks
``/readyz?model=en``: a replica whose ``en`` is full leaves that backend and stays in the
default one, so its other model still gets sessions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from bench.common.haproxy_cluster import HAPROXY, Cluster, haproxy_cluster
from gateway.client import ServerError, transcribe
from tests.helpers.checksums import checksum
from tests.helpers.timing import within

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(HAPROXY is None, reason="haproxy not installed (apt install haproxy)"),
]

CHECK_INTER_S = 0.2
MODELS = """
default = "checksum"

[models.checksum]
model = "checksum"

[models.en]
model = "checksum"
max_sessions = 2
"""
# A replica's en full: two held sessions. (The tests' own sessions, one at a time, never
# fill it: a session ends on the server's side a moment after its client has its final.)
FULL = 2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("haproxy-models")
    models = logs / "models.toml"
    models.write_text(MODELS)
    with haproxy_cluster(
        logs,
        {"ASR_MODELS": str(models)},
        check_inter_s=CHECK_INTER_S,
        places=8,
        haproxy_env={"HAPROXY_ROUTED_MODEL": "en"},
    ) as cluster:
        for name in cluster.replicas:
            cluster.wait_for(name, "UP", backend="routed_model")
        yield cluster


def en(url: str) -> str:
    return f"{url.rstrip('/')}/?model=en"


async def test_a_replica_whose_model_is_full_gets_that_models_sessions_no_more(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = json.dumps({"mode": "online", "wav_name": "held", "is_speaking": True})
    gw1 = cluster.replicas["gw1"]
    pcm = b"\3\0" * 16000
    with within(60):
        held = [await connect(en(gw1.url), compression=None) for _ in range(FULL)]
        for ws in held:  # straight to gw1
            await ws.send(config)
        try:
            cluster.wait_for("gw1", "DOWN", backend="routed_model")
            # The default backend still has it: only its en is full.
            assert cluster.servers()["gw1"]["status"].startswith("UP")
            for _ in range(4):  # through HAProxy: never to gw1, whose en would say 1013
                transcript = await transcribe(en(cluster.url), pcm, realtime=False)
                assert transcript.messages[-1]["text"] == checksum(pcm)
            served = {
                name: int(row["stot"]) for name, row in cluster.servers("routed_model").items()
            }
            assert served["gw1"] == 0
            assert served["gw2"] + served["gw3"] == 4
            # The other model's sessions still reach gw1 too.
            for _ in range(3):
                transcript = await transcribe(cluster.url, pcm, realtime=False)
                assert transcript.messages[-1]["text"] == checksum(pcm)
        finally:
            for ws in held:
                await ws.close()
        cluster.wait_for("gw1", "UP", backend="routed_model")


async def test_a_model_no_replica_can_take_is_refused_by_haproxy(cluster: Cluster) -> None:
    config = json.dumps({"mode": "online", "wav_name": "held", "is_speaking": True})
    with within(60):
        replicas = list(cluster.replicas.values()) * FULL
        held = [await connect(en(replica.url), compression=None) for replica in replicas]
        try:
            for ws in held:
                await ws.send(config)
            for name in cluster.replicas:
                cluster.wait_for(name, "DOWN", backend="routed_model")
            with pytest.raises(ServerError) as refused:
                await transcribe(en(cluster.url), b"\0\0" * 1600, realtime=False)
            assert refused.value.code == 503  # HAProxy's: no server for this model
        finally:
            for ws in held:
                await ws.close()
        for name in cluster.replicas:
            cluster.wait_for(name, "UP", backend="routed_model")
