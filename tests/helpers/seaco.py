"""Two hotword sets, tone-and-noise clips and funasr's own text with hotwords: what the
tests of the hotword models (SeACo, Contextual Paraformer), of the workers and of the
gateway, hold their results to; and a gateway whose offline model is one of them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from starlette.testclient import TestClient, WebSocketTestSession

from gateway.app import create_app
from gateway.audio.endpointer import EndpointSettings
from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.settings import PoolSettings
from tests.helpers.checksums import receive_until_is_final
from tests.helpers.loops import GatewayClient
from workers.engines.paraformer.offline import hotword_argument
from workers.engines.paraformer.streaming import to_float

FIRST = ("一丁", "七万")
SECOND = ("丈三", "上下")


def clip(seed: int, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 3000 * np.sin(2 * np.pi * (200 + 60 * seed) * t)
    return (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)


def generate(model: Any, audio: np.ndarray, words: tuple[str, ...] = ()) -> str:
    """funasr's own text for one utterance: the reference every engine result must equal."""
    hotword = {"hotword": hotword_argument(words)} if words else {}
    return str(model.generate(input=to_float(audio), disable_pbar=True, **hotword)[0]["text"])


FRAME_BYTES = 1920  # 60 ms, as FunASR's Python client sends


@contextmanager
def hotword_gateway(offline_model: Path) -> Iterator[TestClient]:
    """Checksum streaming pool; ``offline_model`` for offline and 2pass-offline passes."""
    streaming = PoolSettings(model="checksum", devices=("cpu",))
    offline = replace(streaming, model=str(offline_model), kind=Role.OFFLINE)
    settings = GatewaySettings(
        pool=streaming,
        companions={Role.OFFLINE: offline},
        endpoint=EndpointSettings(preroll_ms=0),  # each sentence's offline pass: all of it
        idle_timeout_s=30.0,
    )
    with GatewayClient(create_app(settings)) as client:
        yield client


def send_audio(ws: WebSocketTestSession, audio: np.ndarray) -> None:
    pcm = audio.astype("<i2").tobytes()
    for start in range(0, len(pcm), FRAME_BYTES):
        ws.send_bytes(pcm[start : start + FRAME_BYTES])


def offline_text(ws: WebSocketTestSession, audio: np.ndarray, hotwords: object) -> str:
    """One offline utterance's final text, with ``hotwords`` in its config (None: omitted)."""
    fields: dict[str, object] = {"mode": "offline", "is_speaking": True}
    if hotwords is not None:
        fields["hotwords"] = hotwords
    ws.send_text(json.dumps(fields, ensure_ascii=False))
    send_audio(ws, audio)
    ws.send_text(json.dumps({"is_speaking": False}))
    (final,) = receive_until_is_final(ws)
    return str(final["text"])
