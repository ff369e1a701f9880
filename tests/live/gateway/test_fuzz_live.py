"""The live endpoint under random input: a real uvicorn, hypothesis-made frames.

Each example is one session of random frames (text and binary, random sizes, invalid UTF-8,
huge and deeply nested JSON, every config field with values of every type). The server must
end every bad session with a defined close code, after our JSON error frame when the code is
ours; it must never crash; and good sessions streaming beside the fuzzing all verify.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.sync.connection import Connection
from websockets.typing import Subprotocol

from bench.common.gateway import Gateway, serve_blocking
from gateway.funasr.config import CONFIG_KEYS
from tests.helpers.checksums import END, check_online, config

pytestmark = pytest.mark.slow

MAX_FRAME_BYTES = 65536
MAX_TEXT_BYTES = 4096
# Ours (1008 protocol, 1009 too large) come after our error frame; 1007 is the WebSocket
# layer's own answer to a text frame that is not UTF-8 (RFC 6455), sent by uvicorn.
OUR_CODES = {1008, 1009}
DEFINED_CODES = OUR_CODES | {1007}
ENOUGH = 5  # good sessions verified beside the fuzzing


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One server for the whole module; on leaving, it must still run, then exit 0."""
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_MAX_FRAME_BYTES": str(MAX_FRAME_BYTES),
        "ASR_MAX_TEXT_BYTES": str(MAX_TEXT_BYTES),
        "ASR_MAX_SESSIONS": "256",
    }
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    with serve_blocking(env, log, ready_timeout=60) as server:
        yield server
        assert server.process.returncode is None, f"the server died:\n{server.output()}"


def open_ws(server: Gateway) -> ClientConnection:
    return connect(
        server.url,
        subprotocols=[Subprotocol("binary")],
        compression=None,
        max_size=None,
        proxy=None,
        open_timeout=10,
    )


# -- good sessions beside the fuzzing ------------------------------------------------------


@dataclass
class GoodSessions:
    """A thread that streams verified checksum sessions until told to stop."""

    server: Gateway
    verified: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    enough: threading.Event = field(default_factory=threading.Event)  # ENOUGH verified

    def run(self) -> None:
        rng = random.Random(0)
        while not self.stop.is_set():
            pcm = rng.randbytes(19200 * rng.randint(1, 3) + rng.randrange(0, 19200, 2))
            try:
                with open_ws(self.server) as ws:
                    ws.send(config())
                    for start in range(0, len(pcm), 3200):
                        ws.send(pcm[start : start + 3200])
                    ws.send(END)
                    results: list[dict[str, Any]] = []
                    while not results or not results[-1].get("is_final"):
                        results.append(json.loads(ws.recv(timeout=10)))
                check_online(results, pcm, 19200)
                self.verified += 1
                if self.verified >= ENOUGH:
                    self.enough.set()
            except Exception as exc:  # any failure of a good session fails the test
                self.failures.append(f"{type(exc).__name__}: {exc}")


@pytest.fixture(scope="module")
def good_sessions(live_server: Gateway) -> Iterator[GoodSessions]:
    good = GoodSessions(live_server)
    thread = threading.Thread(target=good.run, daemon=True)
    thread.start()
    yield good
    good.stop.set()
    thread.join(30)


# -- the frames ----------------------------------------------------------------------------

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
_field_names = st.sampled_from([*sorted(CONFIG_KEYS), "is_speaking", "is_finished", "x"])
_config_like = st.dictionaries(_field_names, _json_values, max_size=6).map(
    lambda fields: json.dumps(fields, allow_nan=True)
)


@dataclass(frozen=True)
class InvalidUtf8:
    """Bytes sent in a text frame."""

    data: bytes


def _sizes_around(limit: int) -> st.SearchStrategy[int]:
    """Any size up to twice ``limit``, and the sizes at its edges more often than chance."""
    edges = st.sampled_from([limit - 16, limit, limit + 1, 2 * limit])
    return st.integers(min_value=0, max_value=2 * limit) | edges


_frames = st.one_of(
    _config_like,
    st.just(config()),
    st.just(END),
    st.binary(max_size=64),
    _sizes_around(MAX_FRAME_BYTES).map(lambda n: bytes(n)),
    st.text(max_size=64),
    _sizes_around(MAX_TEXT_BYTES).map(lambda n: json.dumps({"wav_name": "x" * n})),
    st.integers(min_value=1, max_value=5000).map(lambda depth: "[" * depth + "]" * depth),
    st.binary(min_size=1, max_size=16).map(lambda b: InvalidUtf8(b"\xff" + b)),
)


def close_code_after(ws: Connection) -> tuple[int | None, list[dict[str, Any]]]:
    """Read until the server closes (its code) or goes quiet (None, and we close)."""
    messages: list[dict[str, Any]] = []
    try:
        while True:
            frame = ws.recv(timeout=0.5)
            messages.append(json.loads(frame))
    except TimeoutError:
        ws.close()
        return None, messages
    except ConnectionClosed as closed:
        return (closed.rcvd.code if closed.rcvd else None), messages


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(start_with_config=st.booleans(), frames=st.lists(_frames, min_size=1, max_size=8))
def test_random_frames_get_a_defined_close_and_disturb_nobody(
    live_server: Gateway,
    good_sessions: GoodSessions,
    start_with_config: bool,
    frames: list[object],
) -> None:
    if start_with_config:  # else most sessions would fail on their first frame
        frames = [config(), *frames]
    with open_ws(live_server) as ws:
        try:
            for frame in frames:
                if isinstance(frame, InvalidUtf8):
                    ws.send(frame.data, text=True)
                else:
                    assert isinstance(frame, str | bytes)
                    ws.send(frame)
        except ConnectionClosed:
            pass  # the server closed already; its code is read below
        code, messages = close_code_after(ws)
    event(f"closed {code}")
    if code is None:
        return  # every frame was acceptable; we closed it ourselves
    assert code in DEFINED_CODES, (code, messages)
    errors = [m for m in messages if m.get("type") == "error"]
    if code in OUR_CODES:
        assert errors, f"closed {code} without our error frame"
        assert errors[-1]["code"] == code
        assert errors[-1]["message"]


def test_good_sessions_verified_beside_the_fuzzing_and_no_traceback(
    live_server: Gateway, good_sessions: GoodSessions
) -> None:
    """Runs after the fuzz test (same module, file order): the good sessions all verified."""
    good_sessions.enough.wait(timeout=20)  # bounds a hang: they are usually long done
    good_sessions.stop.set()
    assert not good_sessions.failures, good_sessions.failures[:3]
    assert good_sessions.verified >= ENOUGH
    health = httpx.get(f"{live_server.http}/readyz", trust_env=False).json()
    assert health["ready"] is True
    assert all(w["restarts"] == 0 for w in health["workers"])
    # A bad session is an error frame and a close, never an unhandled exception, and no
    # traceback: uvicorn's own line for a text frame that is not UTF-8 (it answers 1007
    # itself, before the app sees the frame) is one WARNING line (gateway.ops.server_log).
    log = live_server.output()
    assert "Exception in ASGI application" not in log
    assert "Traceback" not in log
