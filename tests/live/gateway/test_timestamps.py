"""Token times from an offline model that predicts them (BiCifParaformer), end to end."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from starlette.testclient import TestClient

from gateway.app import create_app
from gateway.audio.endpointer import EndpointSettings, EnergyEndpointer
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from tests.helpers.checksums import END, config, receive_until_is_final
from tests.helpers.loops import GatewayClient
from tests.helpers.vad import spoken
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.runtime.model_dir import model_class

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(tiny_timestamp_model: Path) -> Iterator[TestClient]:
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(streaming, model=str(tiny_timestamp_model), kind=Role.OFFLINE)
    settings = GatewaySettings(
        pool=streaming, companions={Role.OFFLINE: offline}, idle_timeout_s=30.0
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


def reference(model_dir: Path, audio: np.ndarray) -> dict[str, Any]:
    result = load_automodel(str(model_dir), "cpu", 1).generate(
        input=to_float(audio), disable_pbar=True
    )
    return dict(result[0])


def test_the_synthetic_timestamp_model_is_a_bicif_paraformer(tiny_timestamp_model: Path) -> None:
    assert model_class(tiny_timestamp_model) == "BiCifParaformer"


def test_transcribe_returns_the_models_timestamps(
    client: TestClient, tiny_timestamp_model: Path
) -> None:
    audio = spoken(11, ("speech", 2.0))
    expected = reference(tiny_timestamp_model, audio)
    assert expected["timestamp"]  # the random model does predict some
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, 16000, format="WAV", subtype="PCM_16")
    response = client.post(
        "/v1/transcribe", files={"file": ("a.wav", buffer.getvalue(), "audio/wav")}
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["text"] == expected["text"]
    assert body["timestamps"] == expected["timestamp"]
    # No punctuation model: one sentence of every token, as in stamp_sents.
    tokens = [c for c in expected["text"] if not c.isspace()]
    assert body["sentences"] == [
        {
            "text_seg": " ".join(tokens),
            "punc": "",
            "start": expected["timestamp"][0][0],
            "end": expected["timestamp"][-1][1],
            "ts_list": expected["timestamp"],
        }
    ]


def test_offline_results_carry_funasrs_timestamp_field(
    client: TestClient, tiny_timestamp_model: Path
) -> None:
    audio = spoken(12, ("speech", 1.5))
    expected = reference(tiny_timestamp_model, audio)
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline"))
        ws.send_bytes(audio.astype("<i2").tobytes())
        ws.send_text(END)
        message = ws.receive_json()
    assert message["text"] == expected["text"]
    assert message["timestamp"] == json.dumps(expected["timestamp"], separators=(",", ":"))
    # No punctuation model: one sentence of every token, as funasr's split gives it then.
    tokens = [c for c in expected["text"] if not c.isspace()]
    assert message["stamp_sents"] == [
        {
            "text_seg": " ".join(tokens),
            "punc": "",
            "start": expected["timestamp"][0][0],
            "end": expected["timestamp"][-1][1],
            "ts_list": expected["timestamp"],
        }
    ]


def test_2pass_sentence_times_count_from_the_utterances_start(
    client: TestClient, tiny_timestamp_model: Path
) -> None:
    """Sentence two's offline pass starts 300 ms (the pre-roll) before its speech: its
    times are the model's on that audio plus where it starts in the utterance."""
    audio = spoken(13, ("speech", 1.2), ("quiet", 2.0), ("speech", 1.0))
    pcm = audio.astype("<i2").tobytes()
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="2pass"))
        for start in range(0, len(pcm), 3200):
            ws.send_bytes(pcm[start : start + 3200])
        ws.send_text(END)
        messages = receive_until_is_final(ws)
    offline = [m for m in messages if m["mode"] == "2pass-offline"]
    assert len(offline) == 2
    # Where the session cuts and where sentence two's speech starts: the endpointer's say.
    endpointer = EnergyEndpointer(EndpointSettings())
    (end,) = endpointer.push(pcm)
    assert endpointer.speech_start is not None
    second_start = end.offset + endpointer.speech_start - 300 * 32  # less the pre-roll
    first = reference(tiny_timestamp_model, audio[: end.offset // 2])
    second = reference(tiny_timestamp_model, audio[second_start // 2 :])
    shift = second_start // 32
    assert offline[0]["text"] == first["text"]
    assert json.loads(offline[0]["timestamp"]) == first["timestamp"]
    assert offline[1]["text"] == second["text"]
    assert json.loads(offline[1]["timestamp"]) == [
        [s + shift, e + shift] for s, e in second["timestamp"]
    ]
    # Its sentence's times count from the utterance's start too.
    (sentence,) = offline[1]["stamp_sents"]
    assert sentence["ts_list"] == json.loads(offline[1]["timestamp"])
    assert sentence["start"] == second["timestamp"][0][0] + shift


@pytest.fixture(scope="module")
def punctuated(tiny_timestamp_model: Path, tiny_punc_model: Path) -> Iterator[TestClient]:
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(
        streaming,
        model=str(tiny_timestamp_model),
        kind=Role.OFFLINE,
        punc_model=str(tiny_punc_model),
    )
    settings = GatewaySettings(
        pool=streaming, companions={Role.OFFLINE: offline}, idle_timeout_s=30.0
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


def test_stamp_sents_split_where_funasr_splits_the_punctuated_text(
    punctuated: TestClient, tiny_timestamp_model: Path, tiny_punc_model: Path
) -> None:
    """The C++ server's shape; the split, tokens and times funasr's own (its punctuation
    model's ids on the model's text, through ``timestamp_sentence``)."""
    from funasr.utils.timestamp_tools import timestamp_sentence

    audio = spoken(14, ("speech", 3.0))
    expected = reference(tiny_timestamp_model, audio)
    punc = load_automodel(str(tiny_punc_model), "cpu", 1).generate(
        input=expected["text"], disable_pbar=True
    )[0]
    theirs = timestamp_sentence(
        punc["punc_array"], expected["timestamp"], " ".join(expected["text"]), True
    )
    assert len(theirs) > 1, "the random punctuation model put no mark inside the text"
    with punctuated.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline", itn=False))
        ws.send_bytes(audio.astype("<i2").tobytes())
        ws.send_text(END)
        message = ws.receive_json()
    assert message["text"] == punc["text"]
    ours = message["stamp_sents"]
    assert [(s["text_seg"].replace(" ", ""), s["start"], s["end"], s["ts_list"]) for s in ours] == [
        (s["raw_text"].replace(" ", ""), s["start"], s["end"], s["timestamp"]) for s in theirs
    ]
    assert [s["punc"] for s in ours] == [s["text"][-1] for s in theirs]
