"""Streaming SenseVoice through the gateway, on FunASR's protocol: each speech region its
own stream, partials tagged, each region's final text funasr's own decode of exactly the
region's audio (``online``), and each sentence's ``2pass-offline`` text its decode whole."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.audio.endpointer import EndpointSettings, EnergyEndpointer
from gateway.settings import GatewaySettings
from shared.settings import PoolSettings
from tests.helpers.checksums import receive_until_is_final
from tests.helpers.loops import GatewayClient
from tests.helpers.seaco import send_audio
from tests.live.workers.test_sensevoice import clip, raw_text
from workers.engines.paraformer.streaming import load_automodel
from workers.engines.sensevoice.engine import split_tags

pytestmark = pytest.mark.slow

# A pre-roll longer than any pause here: each 2pass-offline pass decodes its whole sentence.
ENDPOINT = EndpointSettings(preroll_ms=5000)
MAX_SEGMENT_SECONDS = 20


@pytest.fixture(scope="module")
def client(tiny_sensevoice_model: Path) -> Iterator[TestClient]:
    # No offline model: the streaming pool decodes the 2pass-offline passes too, each
    # sentence as one final piece (the engine's whole-region decode).
    streaming = PoolSettings(model=str(tiny_sensevoice_model), devices=("cpu",))
    settings = GatewaySettings(
        pool=streaming,
        endpoint=ENDPOINT,
        idle_timeout_s=60.0,
    )
    with GatewayClient(create_app(settings)) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def funasr_model(tiny_sensevoice_model: Path) -> object:
    return load_automodel(str(tiny_sensevoice_model), "cpu", 1)


def two_sentences() -> np.ndarray:
    """Speech, a pause the endpointer takes for an end, speech."""
    return np.concatenate([clip(4, 2.1), np.zeros(16000, np.int16), clip(9, 1.6)])


def regions(audio: np.ndarray) -> list[np.ndarray]:
    """Where the gateway's energy endpointer cuts ``audio``, as the gateway runs it."""
    endpointer = EnergyEndpointer(ENDPOINT, MAX_SEGMENT_SECONDS * 32000)
    pcm = audio.astype("<i2").tobytes()
    cut, start = [], 0
    for end in endpointer.push(pcm):
        cut.append(pcm[start : start + end.offset])
        start += end.offset
    cut.append(pcm[start:])
    return [np.frombuffer(piece, "<i2") for piece in cut]


def utterance(ws: Any, mode: str, audio: np.ndarray) -> list[dict[str, Any]]:
    config = {"mode": mode, "chunk_size": [0, 10, 5], "svs_lang": "zh", "svs_itn": False}
    ws.send_text(json.dumps({**config, "is_speaking": True}))
    send_audio(ws, audio)
    ws.send_text(json.dumps({"is_speaking": False}))
    return receive_until_is_final(ws)


def shown(frames: list[dict[str, Any]]) -> str:
    """The text a client that reads ``revised`` shows: each frame appended, but a revising
    one's text instead of all before it."""
    text = ""
    for frame in frames:
        text = frame["text"] if frame.get("revised") else text + frame["text"]
    return text


def test_online_regions_end_with_funasrs_decode_of_each(
    client: TestClient, funasr_model: object
) -> None:
    audio = two_sentences()
    cut = regions(audio)
    assert len(cut) == 2, "the test audio has one pause"
    with client.websocket_connect("/") as ws:
        frames = utterance(ws, "online", audio)
    assert {frame["mode"] for frame in frames} == {"online"}
    assert [frame["is_final"] for frame in frames].count(True) == 1
    expected = [split_tags(raw_text(funasr_model, region, "zh", False))[0] for region in cut]
    assert shown(frames) == " ".join(t for t in expected if t)
    partials = [frame for frame in frames if frame["text"] and not frame["is_final"]]
    assert partials, "partials come while the regions stream"
    assert all(frame["language"] == "zh" for frame in partials)
    assert all(frame["emotion"] and frame["event"] for frame in partials)


def test_2pass_partials_are_tagged_and_each_sentence_is_decoded_whole(
    client: TestClient, funasr_model: object
) -> None:
    audio = two_sentences()
    cut = regions(audio)
    with client.websocket_connect("/") as ws:
        frames = utterance(ws, "2pass", audio)
    online = [frame for frame in frames if frame["mode"] == "2pass-online" and frame["text"]]
    offline = [frame for frame in frames if frame["mode"] == "2pass-offline"]
    assert online
    assert all(frame["language"] == "zh" for frame in online if not frame.get("resent"))
    assert [frame["text"] for frame in offline] == [
        split_tags(raw_text(funasr_model, region, "zh", False))[0] for region in cut
    ]
    assert offline[-1]["is_final"]
