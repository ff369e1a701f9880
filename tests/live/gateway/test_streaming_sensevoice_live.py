"""Streaming SenseVoice through a real uvicorn: on FunASR's protocol each speech region its
own stream, partials tagged, each region's final text funasr's own decode of exactly the
region's audio (``online``), and each sentence's ``2pass-offline`` text its decode whole;
through Deepgram's SDK, interim results as it decodes and the utterance's decode final."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deepgram import DeepgramClient
from deepgram.environment import DeepgramClientEnvironment
from deepgram.listen.v1.types import ListenV1Results
from websockets.sync.client import connect

from bench.common.gateway import Gateway, serve_blocking
from gateway.audio.endpointer import EndpointSettings, EnergyEndpointer
from tests.live.workers.test_sensevoice import clip, raw_text
from workers.engines.paraformer.streaming import load_automodel
from workers.engines.sensevoice.engine import split_tags

pytestmark = pytest.mark.slow

# A pre-roll longer than any pause here: each 2pass-offline pass decodes its whole sentence.
ENDPOINT = EndpointSettings(preroll_ms=5000)
MAX_SEGMENT_SECONDS = 20
RECV_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def gateway(
    tiny_sensevoice_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    # No offline model: the streaming pool decodes the 2pass-offline passes too, each
    # sentence as one final piece (the engine's whole-region decode).
    env = {
        "ASR_MODEL": str(tiny_sensevoice_model),
        "ASR_DEVICES": "cpu",
        "ASR_SENTENCE_PREROLL_MS": str(ENDPOINT.preroll_ms),
        "ASR_MAX_SEGMENT_SECONDS": str(MAX_SEGMENT_SECONDS),
    }
    log = tmp_path_factory.mktemp("streaming-sensevoice") / "server.log"
    with serve_blocking(env, log, ready_timeout=120) as server:
        yield server


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


def utterance(server: Gateway, mode: str, audio: np.ndarray) -> list[dict[str, Any]]:
    """One utterance on FunASR's protocol, as its clients send it; every frame up to the
    final one."""
    config = {"mode": mode, "chunk_size": [0, 10, 5], "svs_lang": "zh", "svs_itn": False}
    frames: list[dict[str, Any]] = []
    with connect(server.url, open_timeout=10) as ws:
        ws.send(json.dumps({**config, "is_speaking": True}))
        pcm = audio.astype("<i2").tobytes()
        for at in range(0, len(pcm), 1920):  # 60 ms, as FunASR's client sends
            ws.send(pcm[at : at + 1920])
        ws.send(json.dumps({"is_speaking": False}))
        while not frames or not frames[-1]["is_final"]:
            frame = json.loads(ws.recv(timeout=RECV_TIMEOUT_S))
            assert "type" not in frame, frame  # no error frame
            frames.append(frame)
    return frames


def shown(frames: list[dict[str, Any]]) -> str:
    """The text a client that reads ``revised`` shows: each frame appended, but a revising
    one's text instead of all before it."""
    text = ""
    for frame in frames:
        text = frame["text"] if frame.get("revised") else text + frame["text"]
    return text


def test_online_regions_end_with_funasrs_decode_of_each(
    gateway: Gateway, funasr_model: object
) -> None:
    audio = two_sentences()
    cut = regions(audio)
    assert len(cut) == 2, "the test audio has one pause"
    frames = utterance(gateway, "online", audio)
    assert {frame["mode"] for frame in frames} == {"online"}
    assert [frame["is_final"] for frame in frames].count(True) == 1
    expected = [split_tags(raw_text(funasr_model, region, "zh", False))[0] for region in cut]
    assert shown(frames) == " ".join(t for t in expected if t)
    partials = [frame for frame in frames if frame["text"] and not frame["is_final"]]
    assert partials, "partials come while the regions stream"
    assert all(frame["language"] == "zh" for frame in partials)
    assert all(frame["emotion"] and frame["event"] for frame in partials)


def test_2pass_partials_are_tagged_and_each_sentence_is_decoded_whole(
    gateway: Gateway, funasr_model: object
) -> None:
    audio = two_sentences()
    cut = regions(audio)
    frames = utterance(gateway, "2pass", audio)
    online = [frame for frame in frames if frame["mode"] == "2pass-online" and frame["text"]]
    offline = [frame for frame in frames if frame["mode"] == "2pass-offline"]
    assert online
    assert all(frame["language"] == "zh" for frame in online if not frame.get("resent"))
    assert [frame["text"] for frame in offline] == [
        split_tags(raw_text(funasr_model, region, "zh", False))[0] for region in cut
    ]
    assert offline[-1]["is_final"]


def test_deepgrams_sdk_gets_interim_results_and_the_utterances_decode(
    gateway: Gateway, funasr_model: object
) -> None:
    """One utterance of speech, closed: interim results while it streams (the region's text
    so far), then its final transcript, funasr's decode of all of it (Deepgram's words are
    the text's, spaced)."""
    audio = clip(6, 2.4)
    ws = f"ws://127.0.0.1:{gateway.port}"
    environment = DeepgramClientEnvironment(
        base=gateway.http, production=ws, agent=ws, agent_rest=gateway.http
    )
    client = DeepgramClient(api_key="unused", environment=environment)
    pcm = audio.astype("<i2").tobytes()
    with client.listen.v1.connect(
        model="nova-3",
        encoding="linear16",
        sample_rate=16000,
        interim_results="true",
        language="zh",
        endpointing="false",
    ) as socket:
        for at in range(0, len(pcm), 3200):  # 100 ms messages
            socket.send_media(pcm[at : at + 3200])
        socket.send_close_stream()
        results = [m for m in socket if isinstance(m, ListenV1Results)]
    interim = [r for r in results if not r.is_final]
    finals = [r for r in results if r.is_final]
    assert any(r.channel.alternatives[0].transcript for r in interim)
    # Deepgram asks no smart_format and no punctuate: SenseVoice's own ITN is off.
    expected = split_tags(raw_text(funasr_model, audio, "zh", False))[0]
    transcript = "".join(r.channel.alternatives[0].transcript for r in finals)
    assert transcript.replace(" ", "") == expected.replace(" ", "")
