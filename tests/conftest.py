"""Fixtures shared by the whole suite, and its two lanes.

Everything under ``tests/live/`` starts something: a gateway (uvicorn, or the app with its
real worker processes under Starlette's TestClient), worker pools, a browser, HAProxy, a
client in a subprocess. Those tests are marked ``slow`` here, by where they are, so that
``pytest -m "not slow"`` is the fast lane: the sans-I/O parts and the in-process units.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.testclient import WebSocketTestSession
from starlette.types import Message

from workers.models.resolve import ensure_synthetic

LIVE = Path(__file__).parent / "live"


def pytest_configure(config: pytest.Config) -> None:
    # xdist's --dist loadfile hands out the files with the most tests first, which leaves
    # the one-test live files (a bench run of over a minute among them) to the end of the
    # run, where one process works through them while the other has nothing left to take.
    # In collection order tests/live/ comes before the fast unit files of tests/shared/ and
    # tests/workers/, which then fill that tail.
    if getattr(config.option, "loadscopereorder", None) is True:
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if LIVE in item.path.parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def every_frame_is_read_by_funasr_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every text frame any endpoint test receives from the app is checked to be one that
    FunASR's clients read without a fault (``tests.helpers.checksums.funasr_reads``)."""
    from tests.helpers.checksums import funasr_reads

    receive = WebSocketTestSession.receive

    def checked(session: WebSocketTestSession) -> Message:
        message = receive(session)
        if message.get("type") == "websocket.send" and message.get("text") is not None:
            funasr_reads(json.loads(message["text"]))
        return message

    monkeypatch.setattr(WebSocketTestSession, "receive", checked)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache for the session: synthetic models are built here once."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny_streaming_model(model_cache: Path) -> Path:
    """The tiny random-weight streaming Paraformer (~1 MB), built once per session."""
    return ensure_synthetic(model_cache, "streaming", "tiny")


@pytest.fixture(scope="session")
def tiny_offline_model(model_cache: Path) -> Path:
    """The tiny random-weight offline Paraformer, built once per session."""
    return ensure_synthetic(model_cache, "offline", "tiny")


@pytest.fixture(scope="session")
def tiny_vad_model(model_cache: Path) -> Path:
    """The random-weight FSMN-VAD (real size, 0.4 M parameters; energy-thresholded)."""
    return ensure_synthetic(model_cache, "vad", "tiny")


@pytest.fixture(scope="session")
def tiny_punc_model(model_cache: Path) -> Path:
    """The tiny random-weight CT-Transformer punctuation model."""
    return ensure_synthetic(model_cache, "punc", "tiny")


@pytest.fixture(scope="session")
def tiny_timestamp_model(model_cache: Path) -> Path:
    """A tiny random-weight BiCifParaformer: an offline model that predicts token times."""
    from workers.models.synthetic.paraformer import build_model_dir

    return build_model_dir(model_cache / "synthetic-bicif-tiny", "offline", "tiny", timestamps=True)


@pytest.fixture(scope="session")
def tiny_sensevoice_model(model_cache: Path) -> Path:
    """The tiny random-weight SenseVoiceSmall: an offline model that takes a language and
    tags its results."""
    return ensure_synthetic(model_cache, "sensevoice", "tiny")


@pytest.fixture(scope="session")
def campplus_model(model_cache: Path) -> Path:
    """The random-weight CAM++ speaker model (the real size, 6.8 M parameters)."""
    return ensure_synthetic(model_cache, "campplus", "tiny")


@pytest.fixture(scope="session")
def tiny_seaco_model(model_cache: Path) -> Path:
    """The tiny random-weight SeACo-Paraformer: an offline model that takes hotwords."""
    return ensure_synthetic(model_cache, "seaco", "tiny")
