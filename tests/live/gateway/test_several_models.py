"""Several models in one gateway (``ASR_MODELS``), on a real uvicorn with real workers.

Served at once: ``zh``, the tiny streaming Paraformer, with a tiny SeACo-Paraformer as its
offline companion; ``en``, a streaming Paraformer of another seed and another vocabulary
(no character in common with ``zh``'s); ``sum``, the checksum engine, at most three sessions.
Each session's text must equal funasr's own output for its model, so no session can get
another model's text unnoticed; the vocabularies make a crossing visible in any one text.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest
from websockets.asyncio.client import connect

from bench.common.gateway import Gateway, serve_blocking
from gateway.client import ServerError
from tests.helpers.checksums import checksum
from tests.helpers.several_models import (
    committed_transcript,
    funasr_streaming_texts,
    get,
    in_vocabulary,
    online_texts,
    readyz,
    realtime_client,
    sessions_through_a_fault,
    speech_like,
    sum_sessions_ended,
    url,
    wav_bytes,
)
from tests.helpers.timing import within
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.models.synthetic.paraformer import build_model_dir

pytestmark = pytest.mark.anyio

# sum's own cap: one more than the tests run at once, as a session ends on the server's side
# a moment after its client has its final.
SUM_PLACES = 3


@pytest.fixture(scope="module")
def other_vocabulary_model(model_cache: Path) -> Path:
    target = model_cache / "synthetic-streaming-tiny-seed7-vocabulary1"
    if (target / "model.pt").is_file():
        return target
    return build_model_dir(target, "streaming", "tiny", seed=7, vocabulary=1)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_streaming_model: Path,
    tiny_seaco_model: Path,
    other_vocabulary_model: Path,
    model_cache: Path,
) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("several-models")
    models = folder / "models.toml"
    models.write_text(
        f"""
default = "zh"

[models.zh]
model = "{tiny_streaming_model}"
offline = "zh-offline"

[models.zh-offline]
model = "{tiny_seaco_model}"

[models.en]
model = "{other_vocabulary_model}"
# A hung worker of en's is taken for hung after 3 s (the default is 60).
worker_step_timeout = 3
worker_step_seconds_per_audio_second = 0

[models.sum]
model = "checksum"
devices = ["cpu", "cpu"]
max_sessions = {SUM_PLACES}
"""
    )
    env = {
        "ASR_MODELS": str(models),
        "ASR_DEVICES": "cpu",
        "ASR_MODEL_CACHE": str(model_cache),
        "ASR_MAX_SESSIONS": "16",
    }
    for name in ("ASR_MODEL", "ASR_OFFLINE_MODEL", "ASR_VAD_MODEL", "ASR_PUNC_MODEL"):
        assert name not in os.environ, f"{name} is set: the models file names the models"
    with serve_blocking(env, folder / "server.log", ready_timeout=180) as gateway:
        yield gateway


async def test_each_session_gets_its_own_models_text_as_funasr_gives_it(
    server: Gateway, tiny_streaming_model: Path, other_vocabulary_model: Path
) -> None:
    audio = speech_like(3.3, 1)
    pcm = audio.tobytes()
    zh = funasr_streaming_texts(tiny_streaming_model, audio)
    en = funasr_streaming_texts(other_vocabulary_model, audio)
    assert "".join(zh), "the tiny models emit tokens"
    assert "".join(en)
    assert in_vocabulary("".join(zh), 0)
    assert in_vocabulary("".join(en), 1)
    got: dict[str, list[list[str]]] = {"zh": [], "en": [], "sum": [], "default": []}

    async def run(name: str) -> None:
        model = None if name == "default" else name
        got[name].append(await online_texts(server, model, pcm))

    with within(120):
        async with anyio.create_task_group() as group:  # all at once, two of each
            for name in ("zh", "en", "sum", "default") * 2:
                group.start_soon(run, name)
    assert got["zh"] == [zh, zh]
    assert got["default"] == [zh, zh]  # no ?model=: the file's default
    assert got["en"] == [en, en]
    assert got["sum"][0][-1] == checksum(pcm)
    assert got["sum"][0] == got["sum"][1]


async def test_the_config_names_the_model_and_the_url_cannot_be_overridden(
    server: Gateway,
) -> None:
    pcm = speech_like(1.3, 2).tobytes()
    with within(60):
        assert (await online_texts(server, None, pcm, model="sum"))[-1] == checksum(pcm)
        with pytest.raises(ServerError) as refused:
            await online_texts(server, "zh", pcm, model="sum")
    assert refused.value.code == 1008
    assert "the URL chose model 'zh'" in refused.value.message


async def test_an_unknown_model_is_refused_with_1008_before_any_place_is_taken(
    server: Gateway,
) -> None:
    before = (await readyz(server)).json()["sessions"]["active"]
    with within(30):
        async with connect(url(server, "klingon")) as ws:
            error = json.loads(await ws.recv())
            await ws.wait_closed()
    assert ws.close_code == 1008
    assert "model 'klingon' is not served here; models: zh, en, sum" in error["message"]
    assert (await readyz(server)).json()["sessions"]["active"] == before
    with pytest.raises(ServerError) as refused:
        await online_texts(server, None, b"\0\0" * 100, model="klingon")
    assert refused.value.code == 1008
    metrics = (await get(server, "/metrics")).text
    assert 'asr_sessions_refused_total{reason="unknown_model"}' in metrics
    assert "klingon" not in metrics  # no client makes a label value


async def test_a_full_model_refuses_with_1013_while_the_others_still_admit(
    server: Gateway, tiny_streaming_model: Path
) -> None:
    config = json.dumps({"mode": "online", "wav_name": "held", "is_speaking": True})
    with within(60):
        await sum_sessions_ended(server)
        held = [await connect(url(server, "sum")) for _ in range(SUM_PLACES)]
        try:
            for ws in held:
                await ws.send(config)
                await ws.send(b"\1\0" * 320)
            assert (await readyz(server, "sum")).status_code == 503
            assert (await readyz(server, "sum")).json()["models"]["sum"]["sessions"] == {
                "active": SUM_PLACES,
                "max": SUM_PLACES,
            }
            assert (await readyz(server, "zh")).status_code == 200
            # One model full refuses only its own sessions: the gateway still takes others.
            assert (await readyz(server)).status_code == 200
            with pytest.raises(ServerError) as refused:
                await online_texts(server, "sum", b"\0\0" * 100)
            assert refused.value.code == 1013
            maximum = f"model 'sum' is serving its maximum of {SUM_PLACES} sessions"
            assert maximum in refused.value.message
            audio = speech_like(1.3, 3)
            expected = funasr_streaming_texts(tiny_streaming_model, audio)
            assert await online_texts(server, "zh", audio.tobytes()) == expected
        finally:
            for ws in held:
                await ws.close()
        await sum_sessions_ended(server)
        pcm = b"\2\0" * 16000
        assert (await online_texts(server, "sum", pcm))[-1] == checksum(pcm)
    assert (await readyz(server, "nope")).status_code == 404


async def test_a_killed_worker_of_one_model_never_touches_another_models_sessions(
    server: Gateway, tiny_streaming_model: Path, other_vocabulary_model: Path
) -> None:
    audio = speech_like(3.3, 4)  # not whole chunks: the last one goes with the end
    pcm = audio.tobytes()
    zh = funasr_streaming_texts(tiny_streaming_model, audio)
    await sum_sessions_ended(server)
    sessions = {"zh-1": "zh", "zh-2": "zh", "sum-1": "sum", "sum-2": "sum", "en": "en"}
    outcomes = await sessions_through_a_fault(server, pcm, sessions, "en", signal.SIGKILL, 1.2)
    assert isinstance(outcomes["en"], ServerError)
    assert outcomes["en"].code == 1011
    for key in ("zh-1", "zh-2"):
        assert [m["text"] for m in outcomes[key].messages if m["text"]] == zh
    for key in ("sum-1", "sum-2"):
        assert outcomes[key].messages[-1]["text"] == checksum(pcm)
    assert (await readyz(server, "zh")).json()["models"]["zh"]["workers"][0]["restarts"] == 0
    assert (await get(server, "/healthz")).status_code == 200


def test_files_choose_their_model_in_both_apis(server: Gateway, tiny_seaco_model: Path) -> None:
    audio = speech_like(2.5, 5)
    data = wav_bytes(audio)
    seaco = load_automodel(str(tiny_seaco_model), "cpu", threads=1)
    expected = str(seaco.generate(input=to_float(audio), disable_pbar=True)[0]["text"])
    with httpx.Client(base_url=server.http, trust_env=False, timeout=60) as http:
        by_zh = http.post("/v1/transcribe", files={"file": ("a.wav", data)}, data={"model": "zh"})
        assert by_zh.json()["text"] == expected  # zh's offline companion decodes files
        by_sum = http.post("/v1/transcribe", files={"file": ("a.wav", data)}, data={"model": "sum"})
        assert by_sum.json()["text"] == checksum(audio.tobytes())
        unknown = http.post(
            "/v1/transcribe", files={"file": ("a.wav", data)}, data={"model": "nope"}
        )
        assert unknown.status_code == 404
    client = openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused")
    assert [model.id for model in client.models.list()] == ["zh", "en", "sum"]
    text = client.audio.transcriptions.create(model="zh", file=("a.wav", data)).text
    assert text == expected
    assert client.audio.transcriptions.create(model="whisper-1", file=("a.wav", data)).text == (
        expected  # OpenAI's own names: the default model
    )
    summed = client.audio.transcriptions.create(model="sum", file=("a.wav", data))
    assert summed.text == checksum(audio.tobytes())
    with pytest.raises(openai.NotFoundError):
        client.audio.transcriptions.create(model="nope", file=("a.wav", data))


def test_metrics_label_every_pool_by_its_model(server: Gateway) -> None:
    metrics = httpx.get(f"{server.http}/metrics", trust_env=False).text
    for model, worker in (("zh", "0"), ("zh-offline", "offline-0"), ("en", "0"), ("sum", "1")):
        assert f'asr_worker_ready{{device="cpu",model="{model}",worker="{worker}"}}' in metrics
        assert f'asr_worker_resident_memory_bytes{{device="cpu",model="{model}"' in metrics
    assert f'asr_model_sessions_max{{model="sum"}} {SUM_PLACES}.0' in metrics
    assert 'asr_model_sessions_max{model="zh"} 16.0' in metrics


def test_a_realtime_session_names_its_model_in_either_form(server: Gateway) -> None:
    pcm = speech_like(1.3, 6).tobytes()
    client = realtime_client(server)
    with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        assert conn.recv().type == "session.created"
        audio_input: Any = {
            "format": {"type": "audio/pcm", "rate": 16000},
            "turn_detection": None,
            "transcription": {"model": "sum"},
        }
        conn.session.update(session={"type": "transcription", "audio": {"input": audio_input}})
        assert conn.recv().type == "session.updated"
        assert committed_transcript(conn, pcm) == checksum(pcm)
        # After its first audio the session stays on its model.
        audio_input["transcription"] = {"model": "zh"}
        conn.session.update(session={"type": "transcription", "audio": {"input": audio_input}})
        while (refused := conn.recv()).type != "error":
            assert refused.type == "conversation.item.done"  # the turn's last event
        assert refused.error.code == "invalid_value"
        assert "the session is on model 'sum' since its first audio" in refused.error.message
    beta = client.beta.realtime.connect(
        model="gpt-4o-transcribe", extra_query={"intent": "transcription"}
    )
    with beta as conn:
        conn.recv()
        session: Any = {
            "input_audio_format": "pcm16",
            "input_audio_transcription": {"model": "sum"},
            "turn_detection": None,
        }
        conn.transcription_session.update(session=session)
        assert conn.recv().type == "transcription_session.updated"
        pcm24 = speech_like(0.9, 7).tobytes()  # 24 kHz as the beta's pcm16 is: resampled
        assert committed_transcript(conn, pcm24).count(":") == 1  # a checksum, not zh's text
    # ?model= in the URL, as a proxy routes by it.
    with client.realtime.connect(extra_query={"intent": "transcription", "model": "sum"}) as conn:
        conn.recv()
        plain: Any = {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}
        conn.session.update(session={"type": "transcription", "audio": {"input": plain}})
        conn.recv()
        assert committed_transcript(conn, pcm) == checksum(pcm)


async def test_a_hung_worker_of_one_model_never_touches_another_models_sessions(
    server: Gateway,
) -> None:
    """en's worker stopped (SIGSTOP) mid-stream: taken for hung after its own 3 s step
    timeout, its session 1011; sum's sessions beside it verify."""
    pcm = speech_like(4.3, 8).tobytes()
    await sum_sessions_ended(server)
    sessions = {"en": "en", "sum-1": "sum", "sum-2": "sum"}
    outcomes = await sessions_through_a_fault(server, pcm, sessions, "en", signal.SIGSTOP, 1.0)
    assert isinstance(outcomes["en"], ServerError)
    assert outcomes["en"].code == 1011
    for key in ("sum-1", "sum-2"):
        assert outcomes[key].messages[-1]["text"] == checksum(pcm)


async def test_a_resumed_session_stays_on_its_model(server: Gateway) -> None:
    """Dropped and resumed with another ?model= in the URL: the session's results go on
    from its own model (the checksum of all its audio), not the URL's."""
    first, second = b"\5\0" * 9600, b"\6\0" * 9600
    session_config = json.dumps(
        {"mode": "online", "wav_name": "kept", "is_speaking": True, "resumable": True}
    )
    with within(60):
        ws = await connect(url(server, "sum"), compression=None)
        await ws.send(session_config)
        token = json.loads(await ws.recv())["resume_token"]
        await ws.send(first)
        while "result_id" not in (result := json.loads(await ws.recv())):
            pass
        ws.transport.abort()  # lost as a network loses it: the session parks
        resumed_url = f"{url(server, 'zh')}&resume={token}&last_result={result['result_id']}"
        async with connect(resumed_url, compression=None) as again:
            assert json.loads(await again.recv())["type"] == "session"
            await again.send(second)
            await again.send(json.dumps({"is_speaking": False}))
            while not (message := json.loads(await again.recv())).get("is_final"):
                pass
    assert message["text"] == checksum(first + second)
