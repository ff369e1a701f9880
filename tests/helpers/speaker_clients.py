"""A live gateway's speaker features as a client meets them: WAV bytes and reference clips
of the synthetic voices (``workers.models.synthetic.voices``), a FunASR ``offline`` session
over a real socket, and a config the server refuses."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pytest
import soundfile

from bench.common.gateway import Gateway
from bench.common.messages import END, config
from workers.models.synthetic.voices import Voice, speak


def wav(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def clip_base64(voice: Voice, seconds: float, seed: int) -> str:
    """A reference clip as a FunASR config's ``spk_refs`` takes one: bare base64 WAV."""
    return base64.b64encode(wav(speak(voice, seconds, seed))).decode()


def clip_url(voice: Voice, seconds: float, seed: int) -> str:
    """A reference clip as OpenAI takes one: a WAV data URL."""
    return "data:audio/wav;base64," + clip_base64(voice, seconds, seed)


def offline_session(
    server: Gateway, audio: np.ndarray, mode: str = "offline", **fields: object
) -> list[dict[str, Any]]:
    """A FunASR session of ``audio`` over a real socket (``offline`` unless ``mode`` says
    otherwise): every frame up to the final, or the error frame and the close."""
    from websockets.sync.client import connect

    pcm = audio.astype("<i2").tobytes()
    frames: list[dict[str, Any]] = []
    with connect(server.url, max_size=None, open_timeout=30) as ws:
        ws.send(config(mode=mode, wav_name="talk", **fields))
        for start in range(0, len(pcm), 32000):
            ws.send(pcm[start : start + 32000])
        ws.send(END)
        for raw in ws:
            frame = json.loads(raw)
            frames.append(frame)
            if frame.get("is_final") or frame.get("type") == "error":
                break
    return frames


def refused_config(server: Gateway, **fields: object) -> tuple[dict[str, Any], int]:
    """A config the server refuses: its error frame and the close code."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with connect(server.url, max_size=None, open_timeout=30) as ws:
        ws.send(config(**fields))  # refused at the config: no audio after it
        error = json.loads(ws.recv(timeout=30))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
    assert closed.value.rcvd is not None
    return error, closed.value.rcvd.code


def metric(server: Gateway, name: str, **labels: str) -> float:
    """A sample of the server's ``/metrics`` (0 where it has none yet)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.http + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def workers_cpu(server: Gateway) -> float:
    """The CPU seconds the server's workers have used so far."""
    from bench.common.procfs import cpu_seconds
    from bench.common.procfs import workers as procfs_workers

    return sum(cpu_seconds(pid) for pid in procfs_workers(server.pid))
