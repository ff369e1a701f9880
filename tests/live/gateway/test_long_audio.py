"""Long audio decoded in segments (ASR_MAX_SEGMENT_SECONDS), and the gateway-wide budget
of held audio (ASR_MAX_BUFFERED_SECONDS): the app in-process, real workers."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from gateway.app import create_app
from gateway.audio.endpointer import EndpointSettings
from gateway.audio.segment import cut, silence_by_energy
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from tests.helpers.checksums import END, checksum, config, receive_until_is_final
from tests.helpers.loops import GatewayClient
from tests.helpers.vad import funasr_vad, spoken
from workers.engines.paraformer.streaming import load_automodel, to_float

BYTES_PER_S = 32000
SETTINGS = GatewaySettings(
    pool=PoolSettings(model="checksum", devices=("cpu",)),
    idle_timeout_s=10.0,
    max_session_s=120.0,
    max_segment_s=2.0,
)


def loud(seconds: float, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    return rng.integers(-12000, 12000, int(seconds * 16000), dtype=np.int16).astype("<i2").tobytes()


def quiet(seconds: float) -> bytes:
    return bytes(2 * int(seconds * 16000))


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with GatewayClient(create_app(SETTINGS)) as client:
        yield client


def pieces(text: str, pcm: bytes) -> list[tuple[int, int]]:
    """The byte ranges a joined checksum text covers: ``"<samples>:<crc> ..."`` per segment,
    each checked against the audio it claims."""
    ranges: list[tuple[int, int]] = []
    start = 0
    for part in text.split(" "):
        end = start + int(part.split(":")[0]) * 2
        assert part == checksum(pcm[start:end])
        ranges.append((start, end))
        start = end
    assert start == len(pcm)  # every byte decoded, once, in order
    return ranges


def test_a_long_offline_utterance_is_cut_at_its_pauses(client: TestClient) -> None:
    """5.4 s with pauses at 1.5-1.8 s and 3.3-3.6 s, segments of at most 2 s: three
    segments, each cut inside a pause, decoded and joined into one final result."""
    pcm = loud(1.5, 1) + quiet(0.3) + loud(1.5, 2) + quiet(0.3) + loud(1.8, 3)
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline"))
        for start in range(0, len(pcm), 9600):
            ws.send_bytes(pcm[start : start + 9600])
        ws.send_text(END)
        [result] = receive_until_is_final(ws)
    assert result["mode"] == "offline"
    assert result["is_final"] is True
    ranges = pieces(str(result["text"]), pcm)
    assert len(ranges) == 3
    assert all(end - start <= 2 * BYTES_PER_S for start, end in ranges)
    cuts = [end / BYTES_PER_S for _, end in ranges[:-1]]
    assert 1.5 < cuts[0] < 1.8
    assert 3.3 < cuts[1] < 3.6


def test_an_offline_utterance_with_no_pause_is_cut_at_the_limit(client: TestClient) -> None:
    pcm = loud(4.5, 4)
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline"))
        ws.send_bytes(pcm)
        ws.send_text(END)
        [result] = receive_until_is_final(ws)
    ranges = pieces(str(result["text"]), pcm)
    assert [end - start for start, end in ranges] == [63360, 63360, len(pcm) - 2 * 63360]


def test_a_2pass_sentence_with_no_pause_ends_at_the_limit(client: TestClient) -> None:
    pcm = loud(4.5, 5)
    with client.websocket_connect("/") as ws:
        ws.send_text(config(mode="2pass"))
        for start in range(0, len(pcm), 9600):
            ws.send_bytes(pcm[start : start + 9600])
        ws.send_text(END)
        messages = receive_until_is_final(ws)
    offline = [str(m["text"]) for m in messages if m["mode"] == "2pass-offline"]
    ranges = pieces(" ".join(offline), pcm)
    assert [end - start for start, end in ranges[:-1]] == [63360, 63360]


def test_an_uploaded_file_longer_than_the_limit_is_decoded_in_segments(
    tiny_timestamp_model: Path,
) -> None:
    """With a real offline model that predicts timestamps: the text and timestamps are
    funasr's own for each segment, joined, each segment's times moved to its start."""
    rng = np.random.default_rng(6)
    t = np.arange(int(1.4 * 16000)) / 16000
    tone = (6000 * np.sin(2 * np.pi * 300 * t) + 2000 * rng.standard_normal(t.size)).astype("<i2")
    audio = np.concatenate([tone, np.zeros(4800, "<i2"), tone[::-1], np.zeros(4800, "<i2"), tone])
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(streaming, model=str(tiny_timestamp_model), kind=Role.OFFLINE)
    settings = replace(SETTINGS, companions={Role.OFFLINE: offline})
    buffer = io.BytesIO()
    soundfile.write(buffer, audio, 16000, format="WAV", subtype="PCM_16")
    with GatewayClient(create_app(settings)) as client:
        response = client.post(
            "/v1/transcribe", files={"file": ("long.wav", buffer.getvalue(), "audio/wav")}
        )
    assert response.status_code == 200, response.json()
    body = response.json()
    pcm = audio.tobytes()
    segments = cut(len(pcm), 2 * BYTES_PER_S, silence_by_energy(pcm, EndpointSettings().threshold))
    assert len(segments) == 3
    model = load_automodel(str(tiny_timestamp_model), "cpu", 1)
    texts: list[str] = []
    stamps: list[list[int]] = []
    for segment in segments:
        piece = audio[segment.start // 2 : segment.end // 2]
        [result] = model.generate(input=to_float(piece), disable_pbar=True)
        texts.append(result["text"])
        stamps += [[a + segment.start_ms, b + segment.start_ms] for a, b in result["timestamp"]]
    assert body["text"] == " ".join(text for text in texts if text)
    assert body["timestamps"] == stamps
    assert stamps
    assert stamps[-1][0] >= segments[-1].start_ms


# --- the gateway-wide budget -------------------------------------------------------------


def metric(client: TestClient, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_the_buffered_audio_budget_ends_the_utterance_that_would_exceed_it() -> None:
    """1 s for all sessions together: a session holding 0.8 s leaves 0.2 s; a second one
    that sends 0.5 s offline is closed with 1013 and the reason; the first still verifies;
    once it ends the gauge is back to 0."""
    settings = replace(SETTINGS, max_buffered_s=1.0)
    first_pcm, second_pcm = loud(0.8, 7), loud(0.5, 8)
    with GatewayClient(create_app(settings)) as client:
        assert metric(client, "asr_buffered_audio_max_seconds") == 1.0
        with client.websocket_connect("/") as first:
            first.send_text(config(mode="offline"))
            first.send_bytes(first_pcm)
            first.send_text(json.dumps({"wav_name": "first"}))  # a round trip: held now
            with client.websocket_connect("/") as second:
                second.send_text(config(mode="offline"))
                second.send_bytes(second_pcm)
                error = second.receive_json()
                with pytest.raises(WebSocketDisconnect) as closed:
                    second.receive_json()
            assert error["type"] == "error"
            assert error["code"] == 1013
            assert "ASR_MAX_BUFFERED_SECONDS" in error["message"]
            assert closed.value.code == 1013
            assert metric(client, "asr_buffered_audio_seconds") == pytest.approx(0.8)
            first.send_text(END)
            [result] = receive_until_is_final(first)
        assert result["text"] == checksum(first_pcm)
        assert metric(client, "asr_buffered_audio_seconds") == 0.0


def test_new_sessions_are_refused_while_the_budget_is_spent() -> None:
    settings = replace(SETTINGS, max_buffered_s=1.0)
    with GatewayClient(create_app(settings)) as client:
        with client.websocket_connect("/") as holder:
            holder.send_text(config(mode="offline"))
            holder.send_bytes(loud(1.0, 9))
            holder.send_text(json.dumps({"wav_name": "holder"}))
            with client.websocket_connect("/") as refused:
                error = refused.receive_json()
                with pytest.raises(WebSocketDisconnect) as closed:
                    refused.receive_json()
            assert error["code"] == 1013
            assert closed.value.code == 1013
            assert "ASR_MAX_BUFFERED_SECONDS" in error["message"]
            assert 'reason="audio_budget"' in client.get("/metrics").text
        # The holder left without an end: what it held is given back.
        with client.websocket_connect("/") as admitted:
            admitted.send_text(config(mode="offline"))
            pcm = loud(0.5, 10)
            admitted.send_bytes(pcm)
            admitted.send_text(END)
            [result] = receive_until_is_final(admitted)
        assert result["text"] == checksum(pcm)


def test_with_a_vad_pool_the_cuts_fall_outside_funasrs_speech_regions(
    tiny_vad_model: Path,
) -> None:
    """The FSMN-VAD decides where the pauses are: every cut lies in a gap between the
    speech regions funasr's own VAD finds in the same audio, and inside the silences."""
    audio = spoken(
        11, ("speech", 1.5), ("silence", 1.0), ("speech", 1.5), ("silence", 1.0), ("speech", 1.0)
    )
    pcm = audio.astype("<i2").tobytes()
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    vad = replace(streaming, model=str(tiny_vad_model), kind=Role.VAD)
    settings = replace(SETTINGS, companions={Role.VAD: vad}, max_segment_s=2.5)
    with GatewayClient(create_app(settings)) as client, client.websocket_connect("/") as ws:
        ws.send_text(config(mode="offline"))
        ws.send_bytes(pcm)
        ws.send_text(END)
        [result] = receive_until_is_final(ws)
    ranges = pieces(str(result["text"]), pcm)
    assert len(ranges) == 3
    cuts_ms = [end // 32 for _, end in ranges[:-1]]
    assert 1500 <= cuts_ms[0] <= 2500
    assert 4000 <= cuts_ms[1] <= 5000
    model = load_automodel(str(tiny_vad_model), "cpu", 1)
    cache: dict[str, object] = {}
    segments: list[list[int]] = []
    for start in range(0, len(audio), 16000):
        segments += funasr_vad(model, audio[start : start + 16000], cache)
    speech_ms = [beg for beg, _ in segments if beg != -1], [end for _, end in segments if end != -1]
    regions = list(zip(*speech_ms, strict=False))
    assert regions  # funasr heard the speech
    for at in cuts_ms:
        assert not any(beg < at < end for beg, end in regions), (at, regions)
