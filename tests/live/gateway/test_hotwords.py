"""A session's hotwords reach the SeACo-Paraformer offline model, as FunASR's clients send
them; every expected text is funasr's own ``generate(..., hotword=...)`` on the same audio."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from starlette.testclient import TestClient, WebSocketTestSession

from tests.helpers.checksums import receive_until_is_final
from tests.helpers.seaco import (
    FIRST,
    SECOND,
    clip,
    generate,
    hotword_gateway,
    offline_text,
    send_audio,
)
from workers.engines.paraformer.streaming import load_automodel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def seaco_client(tiny_seaco_model: Path) -> Iterator[TestClient]:
    with hotword_gateway(tiny_seaco_model) as client:
        yield client


@pytest.fixture(scope="module")
def model(tiny_seaco_model: Path) -> Any:
    return load_automodel(str(tiny_seaco_model), "cpu", 1)


def test_offline_results_use_the_hotwords_in_either_client_form(
    seaco_client: TestClient, model: Any
) -> None:
    audio = clip(4, 2.0)
    plain, steered = generate(model, audio), generate(model, audio, FIRST)
    assert plain != steered  # else this test could not tell the words arrived
    as_object = json.dumps(dict.fromkeys(FIRST, 20), ensure_ascii=False)  # the HTML5 page
    with seaco_client.websocket_connect("/") as ws:
        assert offline_text(ws, audio, as_object) == steered
        assert offline_text(ws, audio, ",".join(FIRST)) == steered  # the Python client
        assert offline_text(ws, audio, "") == plain  # cleared for the next utterance
        assert offline_text(ws, audio, None) == plain  # omitted: the last value, none


def two_pass_sentences(
    ws: WebSocketTestSession, at_start: str | None, mid_utterance: str | None
) -> list[str]:
    """Two sentences a 1 s pause apart; hotwords in the config and/or between them."""
    first, second = clip(5, 1.5), clip(6, 1.5)
    pause = np.zeros(16000, dtype=np.int16)  # the endpointer ends the sentence within it
    config: dict[str, object] = {"mode": "2pass", "is_speaking": True}
    if at_start is not None:
        config["hotwords"] = at_start
    ws.send_text(json.dumps(config, ensure_ascii=False))
    send_audio(ws, np.concatenate([first, pause]))
    if mid_utterance is not None:
        ws.send_text(json.dumps({"hotwords": mid_utterance}, ensure_ascii=False))
    send_audio(ws, second)
    ws.send_text(json.dumps({"is_speaking": False}))
    results = receive_until_is_final(ws)
    return [str(m["text"]) for m in results if m["mode"] == "2pass-offline"]


def test_hotwords_set_mid_2pass_reach_the_next_sentences_offline_pass(
    seaco_client: TestClient,
) -> None:
    words = " ".join(SECOND)
    with seaco_client.websocket_connect("/") as ws:
        plain = two_pass_sentences(ws, None, None)
        from_start = two_pass_sentences(ws, words, None)
        ws.send_text(json.dumps({"hotwords": "", "is_speaking": True}))  # clear them again
        ws.send_text(json.dumps({"is_speaking": False}))
        receive_until_is_final(ws)
        from_the_pause = two_pass_sentences(ws, None, words)
    assert len(plain) == len(from_start) == len(from_the_pause) == 2
    assert plain[0] != from_start[0]  # the words steer both sentences
    assert plain[1] != from_start[1]
    # Set in the pause: the first sentence was already cut and decoded without them.
    assert from_the_pause == [plain[0], from_start[1]]


def test_transcribe_uses_the_hotwords_field(seaco_client: TestClient, model: Any) -> None:
    audio = clip(7, 2.0)
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, 16000, format="WAV", subtype="PCM_16")
    files = {"file": ("a.wav", buffer.getvalue(), "audio/wav")}
    response = seaco_client.post("/v1/transcribe", files=files, data={"hotwords": "丈三 上下"})
    assert response.status_code == 200, response.json()
    assert response.json()["text"] == generate(model, audio, SECOND)
    assert response.json()["text"] != generate(model, audio)
