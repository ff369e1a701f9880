"""The Contextual Paraformer (funasr's ``ContextualParaformer``): an offline kind that takes
hotwords, served by the offline Paraformer engine. Every expected text is funasr's own
``generate(..., hotword=...)`` on the same audio and model directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from shared.engines import Role
from shared.messages import StreamOptions
from shared.settings import PoolSettings
from tests.helpers.seaco import FIRST, SECOND, clip, generate, hotword_gateway, offline_text
from tests.helpers.timing import within
from workers.engines import select_engine
from workers.engines.paraformer.streaming import load_automodel
from workers.engines.runtime.model_dir import gives_timestamps, model_class, supports_hotwords
from workers.models.resolve import ensure_synthetic, resolve_model
from workers.pool import WorkerPool

pytestmark = pytest.mark.slow

# A clip whose text each of no words, FIRST and SECOND changes (checked where it is used).
STEERED_CLIP = (34, 1.5)


@pytest.fixture(scope="module")
def contextual_model(model_cache: Path) -> Path:
    return ensure_synthetic(model_cache, "contextual", "tiny")


@pytest.fixture(scope="module")
def model(contextual_model: Path) -> Any:
    return load_automodel(str(contextual_model), "cpu", 1)


def test_it_resolves_as_an_offline_kind_that_takes_hotwords(
    model_cache: Path, contextual_model: Path
) -> None:
    resolved = resolve_model("synthetic-contextual:tiny", str(model_cache), Role.OFFLINE)
    assert resolved.kind.name == "contextual-paraformer"
    assert resolved.model_dir == str(contextual_model)
    assert model_class(contextual_model) == "ContextualParaformer"
    assert supports_hotwords(contextual_model)
    assert not gives_timestamps(contextual_model)
    # The offline ONNX export carries no hotwords: it stays on PyTorch under any runtime.
    assert select_engine(resolved.kind, "onnx") == "paraformer-offline"


def test_the_hotwords_steer_it(model: Any) -> None:
    audio = clip(*STEERED_CLIP)
    texts = {words: generate(model, audio, words) for words in ((), FIRST, SECOND)}
    assert len(set(texts.values())) == 3, texts


@pytest.mark.anyio
async def test_a_pool_decodes_with_each_streams_hotwords(
    contextual_model: Path, model: Any
) -> None:
    audio = clip(*STEERED_CLIP)
    settings = PoolSettings(
        model=str(contextual_model), kind=Role.OFFLINE, devices=("cpu",), chunk_deadline_s=10.0
    )
    texts: dict[tuple[str, ...], str] = {}
    async with WorkerPool(settings) as pool:
        with within(30):
            for words in (FIRST, (), SECOND):
                texts[words] = await pool.transcribe(audio, StreamOptions(hotwords=words))
    assert texts == {words: generate(model, audio, words) for words in texts}


@pytest.fixture(scope="module")
def gateway(contextual_model: Path) -> Iterator[TestClient]:
    with hotword_gateway(contextual_model) as client:
        yield client


def test_a_funasr_session_s_hotwords_reach_it(gateway: TestClient, model: Any) -> None:
    audio = clip(*STEERED_CLIP)
    with gateway.websocket_connect("/") as ws:
        for words in (FIRST, (), SECOND):
            text = offline_text(ws, audio, " ".join(words))
            assert text == generate(model, audio, words), words
