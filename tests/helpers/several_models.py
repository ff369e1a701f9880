"""What the several-models tests share: audio, funasr's own texts for it, and the served
gateway's URLs and status as a client reads them."""

from __future__ import annotations

import base64
import io
import os
import signal
import wave
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import openai

from bench.common.gateway import Gateway
from gateway.client import ServerError, transcribe
from tests.helpers.realtime_audio import COMPLETED
from tests.helpers.timing import within
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.models.synthetic.base import CJK_FIRST, TINY_VOCAB

CHUNK_SAMPLES = 9600  # chunk_size [5, 10, 5]: 600 ms
TINY_CHARACTERS = TINY_VOCAB - 4


def speech_like(seconds: float, seed: int) -> np.ndarray[Any, np.dtype[np.int16]]:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    tone = np.sin(2 * np.pi * (150 + 100 * np.sin(2 * np.pi * 0.5 * t)) * t)
    return (tone * 8000 + rng.normal(0, 1500, t.size)).astype(np.int16)


def funasr_streaming_texts(model_dir: Path, audio: np.ndarray[Any, Any]) -> list[str]:
    """funasr's own texts for ``audio`` in 600 ms chunks, look-back 4/0 (the defaults of a
    FunASR config): what an online session must get, chunk by chunk."""
    model = load_automodel(str(model_dir), "cpu", threads=1)
    chunks = [audio[i : i + CHUNK_SAMPLES] for i in range(0, len(audio), CHUNK_SAMPLES)]
    cache: dict[str, Any] = {}
    texts = []
    for i, chunk in enumerate(chunks):
        result = model.generate(
            input=to_float(chunk),
            cache=cache,
            is_final=i == len(chunks) - 1,
            chunk_size=[5, 10, 5],
            encoder_chunk_look_back=4,
            decoder_chunk_look_back=0,
            disable_pbar=True,
        )
        texts.append(result[0]["text"] if result else "")
    return [text for text in texts if text]


def in_vocabulary(text: str, vocabulary: int) -> bool:
    first = CJK_FIRST + vocabulary * TINY_CHARACTERS
    return all(first <= ord(c) < first + TINY_CHARACTERS for c in text if not c.isspace())


def wav_bytes(audio: np.ndarray[Any, Any]) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes(audio.astype("<i2").tobytes())
    return out.getvalue()


def url(server: Gateway, model: str | None) -> str:
    root = server.url.rstrip("/")
    return root if model is None else f"{root}/?model={model}"


async def online_texts(server: Gateway, url_model: str | None, pcm: bytes, **kw: Any) -> list[str]:
    """An online session's texts, on ``?model=url_model`` (``model=``: in the config)."""
    session = url(server, url_model)
    transcript = await transcribe(session, pcm, mode="online", realtime=False, **kw)
    return [str(m["text"]) for m in transcript.messages if m["text"]]


async def get(server: Gateway, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.http, trust_env=False) as http:
        return await http.get(path)


async def readyz(server: Gateway, model: str | None = None) -> httpx.Response:
    return await get(server, "/readyz" if model is None else f"/readyz?model={model}")


async def sum_sessions_ended(server: Gateway) -> None:
    """Every sum session over on the server's side (a moment after its client's close)."""
    while True:
        sessions = (await readyz(server, "sum")).json()["models"]["sum"]["sessions"]
        if sessions["active"] == 0:
            return
        await anyio.sleep(0.05)


def realtime_client(server: Gateway) -> openai.OpenAI:
    # The beta client always takes wss:// from base_url; websocket_base_url says ws://.
    return openai.OpenAI(
        base_url=f"{server.http}/v1",
        websocket_base_url=f"ws://127.0.0.1:{server.port}/v1",
        api_key="unused",
        max_retries=0,
    )


def committed_transcript(conn: Any, pcm: bytes) -> str:
    for at in range(0, len(pcm), 3200):
        conn.input_audio_buffer.append(audio=base64.b64encode(pcm[at : at + 3200]).decode())
    conn.input_audio_buffer.commit()
    while (event := conn.recv()).type != COMPLETED:
        assert event.type != "error", event
    return str(event.transcript)


async def sessions_through_a_fault(
    server: Gateway,
    pcm: bytes,
    sessions: Mapping[str, str],
    model: str,
    fault: signal.Signals,
    after_s: float,
) -> dict[str, Any]:
    """Real-time online sessions (``sessions``: key to model) all at once, ``model``'s one
    worker sent ``fault`` ``after_s`` into them; each session's transcript or ServerError,
    once the worker has been replaced (a new pid, the model ready again)."""
    (worker,) = (await readyz(server, model)).json()["models"][model]["workers"]
    outcomes: dict[str, Any] = {}

    async def run(key: str, name: str) -> None:
        try:
            outcomes[key] = await transcribe(url(server, name), pcm, mode="online")
        except ServerError as error:
            outcomes[key] = error

    with within(120):
        async with anyio.create_task_group() as group:
            for key, name in sessions.items():
                group.start_soon(run, key, name)
            await anyio.sleep(after_s)  # mid-stream, real time
            os.kill(worker["pid"], fault)
        while (await readyz(server, model)).status_code != 200:  # noqa: ASYNC110 (replaced)
            await anyio.sleep(0.2)
    (replaced,) = (await readyz(server, model)).json()["models"][model]["workers"]
    assert replaced["pid"] != worker["pid"]
    return outcomes
