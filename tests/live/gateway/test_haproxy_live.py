"""Three gateway replicas behind a real HAProxy (Debian's ``haproxy``, which ``.ci/run``
installs; skipped without it), configured by ``deploy/haproxy.cfg`` itself: sessions spread
by least connections, a full replica skipped, a resume routed back to its replica, 500
half-open connections that stop nobody, a rolling restart that fails no session, a killed
replica out of rotation. Checksum engine: every transcript is checked exactly.

The tests share one set of replicas and one HAProxy (module scope), in the order written:
each leaves every replica up and idle for the next.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from bench.common.cutting_proxy import cutting_proxy, random_cuts
from bench.common.haproxy_cluster import CONFIG, HAPROXY, Cluster, haproxy_cluster
from gateway.client import transcribe
from tests.helpers.checksums import checksum, config
from tests.helpers.timing import within

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(HAPROXY is None, reason="haproxy not installed (apt install haproxy)"),
]

PLACES = 8  # each replica's ASR_MAX_SESSIONS, and HAProxy's maxconn for it
CHECK_INTER_S = 0.2
HTTP_REQUEST_TIMEOUT_S = 2
DRAIN_DELAY_S = 1.0  # five agent polls: HAProxy has stopped sending before the drain
RATE = 16_000


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = {"ASR_DRAIN_DELAY": str(DRAIN_DELAY_S), "ASR_DRAIN_TIMEOUT": "5"}
    with haproxy_cluster(
        tmp_path_factory.mktemp("haproxy"),
        env,
        check_inter_s=CHECK_INTER_S,
        http_request_timeout_s=HTTP_REQUEST_TIMEOUT_S,
        places=PLACES,
    ) as cluster:
        yield cluster


async def _open_session(url: str) -> tuple[ClientConnection, str]:
    """A resumable session held open; the replica that took it."""
    websocket = await connect(url, compression=None)
    await websocket.send(config(resumable=True))
    frame: dict[str, Any] = json.loads(await websocket.recv())
    assert frame["type"] == "session", frame
    return websocket, str(frame["replica"])


async def _until_idle(cluster: Cluster) -> None:
    """Every replica's sessions over, as HAProxy counts them."""
    with within(10):
        while any(int(row["scur"]) for row in cluster.servers().values()):  # noqa: ASYNC110 (HAProxy's)
            await anyio.sleep(0.05)


def _sessions_served(cluster: Cluster) -> int:
    """Connections HAProxy has handed to any replica so far (``stot``)."""
    return sum(int(row["stot"]) for row in cluster.servers().values())


def _note_replica(replicas: list[str], session_frame: Mapping[str, object]) -> None:
    replicas.append(str(session_frame["replica"]))


def _pcm(seconds: float, seed: int) -> bytes:
    return random.Random(seed).randbytes(2 * int(RATE * seconds))


async def test_sessions_spread_by_least_connections(cluster: Cluster) -> None:
    sessions = [await _open_session(cluster.url) for _ in range(6)]
    assert Counter(replica for _, replica in sessions) == {"gw1": 2, "gw2": 2, "gw3": 2}
    for websocket, _ in sessions:
        await websocket.close()
    await _until_idle(cluster)


async def test_a_full_replica_is_skipped(cluster: Cluster) -> None:
    """gw1 filled by clients that reach it directly: its agent says weight 0 (and /readyz
    503) and HAProxy sends the next sessions elsewhere."""
    direct = [await _open_session(cluster.replicas["gw1"].url) for _ in range(PLACES)]
    with within(5):
        while cluster.servers()["gw1"]["weight"] != "0":  # noqa: ASYNC110 (HAProxy's)
            await anyio.sleep(0.02)
    through = [await _open_session(cluster.url) for _ in range(4)]
    assert "gw1" not in {replica for _, replica in through}
    for websocket, _ in [*direct, *through]:
        await websocket.close()
    await _until_idle(cluster)
    with within(5):  # its weight back once places are free
        while cluster.servers()["gw1"]["weight"] == "0":  # noqa: ASYNC110 (HAProxy's)
            await anyio.sleep(0.02)


async def test_a_cut_session_resumes_on_its_own_replica_through_haproxy(
    cluster: Cluster,
) -> None:
    """Cut three times between the client and HAProxy; each resume reaches the replica
    named in the token although least connections would often pick another (two in three
    would land elsewhere and be refused with 4421): the results are exact."""
    for seed in range(3):
        pcm = _pcm(3.0, seed)
        replicas: list[str] = []
        plan = random_cuts(seed, 3, up_range=(8_000, 30_000))
        async with cutting_proxy(cluster.port, plan) as proxy:
            transcript = await transcribe(
                proxy.url,
                pcm,
                resumable=True,
                realtime=False,
                on_session=partial(_note_replica, replicas),
            )
        assert transcript.resumes == 3
        assert len(set(replicas)) == 1
        assert transcript.messages[-1]["text"] == checksum(pcm)
        texts = [m["text"] for m in transcript.messages[:-1]]
        chunk = 19_200
        assert texts == [checksum(pcm[: (i + 1) * chunk]) for i in range(len(pcm) // chunk)]
    await _until_idle(cluster)
    # HAProxy logged every connection (9 resumes among them) by its path alone.
    logged = cluster.log.read_text()
    assert '"GET" "/" "HTTP/1.1"' in logged
    assert "resume=" not in logged


async def test_half_open_connections_do_not_stop_normal_clients(cluster: Cluster) -> None:
    """500 connections that send half a request line and wait: normal sessions go on, the
    replicas never see them, and HAProxy drops them at `timeout http-request`."""
    # What one session counts in HAProxy's stot (its upgrade request and the tunnel after it),
    # measured before the half-open connections exist.
    before_one = _sessions_served(cluster)
    await transcribe(cluster.url, _pcm(0.5, 99), realtime=False)
    await _until_idle(cluster)
    per_session = _sessions_served(cluster) - before_one
    sockets: list[socket.socket] = []
    sessions_before = _sessions_served(cluster)
    try:
        for _ in range(500):
            sock = socket.create_connection(("127.0.0.1", cluster.port))
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
            sockets.append(sock)
        started = time.monotonic()
        for seed in range(3):
            pcm = _pcm(1.2, seed)
            result = await transcribe(cluster.url, pcm, realtime=False)
            assert result.text.endswith(checksum(pcm))
        # The last session's connection may still be closing: wait for it, then count what the
        # replicas were given: the three sessions, none of the 500.
        await _until_idle(cluster)
        assert per_session >= 1
        assert _sessions_served(cluster) - sessions_before == 3 * per_session
        for sock in sockets:
            sock.settimeout(HTTP_REQUEST_TIMEOUT_S + 5 - (time.monotonic() - started))
            answer = sock.recv(1024)  # HAProxy's 408, then its close
            assert answer.startswith(b"HTTP/1.1 408") or answer == b""
    finally:
        for sock in sockets:
            sock.close()


async def test_a_rolling_restart_fails_no_session(cluster: Cluster) -> None:
    """Each replica in turn gets SIGTERM, drains, exits 0 and comes back, while two clients
    keep opening sessions through HAProxy: every one of them gets its exact final result."""
    done = anyio.Event()
    served: Counter[str] = Counter()
    failures: list[str] = []

    async def keep_opening(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            pcm = rng.randbytes(2 * RATE)
            try:
                result = await transcribe(
                    cluster.url,
                    pcm,
                    realtime=False,
                    resumable=True,
                    on_session=lambda f: served.update([str(f["replica"])]),
                )
            except Exception as exc:
                failures.append(repr(exc))
                continue
            if result.messages[-1]["text"] != checksum(pcm):
                failures.append(f"wrong final: {result.messages[-1]}")

    async with anyio.create_task_group() as group:
        group.start_soon(keep_opening, 1)
        group.start_soon(keep_opening, 2)
        for name, replica in cluster.replicas.items():
            code = await anyio.to_thread.run_sync(replica.stop, signal.SIGTERM)
            if code != 0:
                failures.append(f"{name} exited with {code}")
            await anyio.to_thread.run_sync(replica.start)
            await anyio.to_thread.run_sync(cluster.wait_for, name, "UP")
        done.set()
    assert failures == []
    assert set(served) == {"gw1", "gw2", "gw3"}
    await _until_idle(cluster)


async def test_a_killed_replica_stops_getting_sessions(cluster: Cluster) -> None:
    """SIGKILL (no drain, no goodbye): sessions opened at once after are redispatched by
    HAProxy (the connection is refused), and its checks take it out within a second."""
    victim = cluster.replicas["gw3"]
    killed_at = time.monotonic()
    await anyio.to_thread.run_sync(victim.stop, signal.SIGKILL)
    replicas = []
    for seed in range(6):
        pcm = _pcm(1.2, seed)
        result = await transcribe(
            cluster.url,
            pcm,
            realtime=False,
            resumable=True,
            on_session=lambda f: replicas.append(str(f["replica"])),
        )
        assert result.messages[-1]["text"] == checksum(pcm)
    assert "gw3" not in replicas
    await anyio.to_thread.run_sync(cluster.wait_for, "gw3", "DOWN")
    assert time.monotonic() - killed_at < 1.0 + 2 * CHECK_INTER_S * 2
    await anyio.to_thread.run_sync(victim.start)
    await anyio.to_thread.run_sync(cluster.wait_for, "gw3", "UP")


def test_the_config_checks(tmp_path: Path) -> None:
    """``haproxy -c`` on the file as shipped, with compose's addresses replaced."""
    assert HAPROXY is not None
    env: Mapping[str, str] = {
        **os.environ,
        "GW1_ADDR": "127.0.0.1:1",
        "GW2_ADDR": "127.0.0.1:2",
        "GW3_ADDR": "127.0.0.1:3",
        "HAPROXY_STATS_SOCKET": str(tmp_path / "s.sock"),
    }
    result = subprocess.run(
        [HAPROXY, "-c", "-f", str(CONFIG)], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
