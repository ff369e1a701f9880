"""SeACo-Paraformer: each stream's hotwords reach funasr's generate, only as words."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

from shared.engines import Role
from shared.errors import WorkerLoadError
from shared.messages import EngineSpec, StreamOptions, StreamResult
from shared.settings import PoolSettings
from tests.helpers.seaco import FIRST, SECOND, clip, generate
from tests.helpers.timing import within
from workers.engines import select_engine
from workers.engines.base import ChunkItem
from workers.engines.paraformer.offline import (
    HOTWORD_FILTER_WORDS,
    ParaformerOfflineEngine,
    hotword_argument,
)
from workers.engines.paraformer.streaming import load_automodel
from workers.engines.runtime.model_dir import supports_hotwords
from workers.models.resolve import resolve_model
from workers.pool import WorkerPool

pytestmark = pytest.mark.slow

NOT_GIVEN = "(no hotword argument)"


class _Spy:
    """Wraps an AutoModel: records each generate call's inputs and hotword argument."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.calls: list[tuple[int, str | None]] = []

    def generate(self, **kwargs: Any) -> Any:
        self.calls.append((len(kwargs["input"]), kwargs.get("hotword", NOT_GIVEN)))
        return self.model.generate(**kwargs)


def _engine(model_dir: Path) -> ParaformerOfflineEngine:
    return ParaformerOfflineEngine.load(EngineSpec("paraformer-offline", model_dir=str(model_dir)))


def test_synthetic_seaco_resolves_as_an_offline_model_that_takes_hotwords(
    model_cache: Path, tiny_seaco_model: Path, tiny_offline_model: Path
) -> None:
    resolved = resolve_model("synthetic-seaco:tiny", str(model_cache), Role.OFFLINE)
    assert resolved.kind.name == "seaco-paraformer"
    assert select_engine(resolved.kind, "onnx") == "paraformer-offline"  # no export of it
    assert resolved.model_dir == str(tiny_seaco_model)  # the fixture's build, in the cache
    assert "SeacoParaformer" in resolved.description
    assert supports_hotwords(tiny_seaco_model)
    assert not supports_hotwords(tiny_offline_model)
    with pytest.raises(WorkerLoadError, match=r"ASR_MODEL=synthetic-seaco:tiny.*not a streaming"):
        resolve_model("synthetic-seaco:tiny", str(model_cache), Role.STREAMING)
    for bad in ("synthetic-seaco:huge", "synthetic-nonesuch:tiny"):
        with pytest.raises(WorkerLoadError, match="synthetic-seaco:tiny"):
            resolve_model(bad, str(model_cache), Role.OFFLINE)


@pytest.mark.parametrize(
    "word",
    [
        "http://127.0.0.1:9/x",  # would be downloaded (a closed port: the call would fail)
        "https://e.invalid/words.txt",
        "words.txt",  # an existing .txt file: would be read, its lines taken as the hotwords
    ],
)
def test_words_that_name_a_url_or_a_file_are_only_words(
    tiny_seaco_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, word: str
) -> None:
    import funasr.models.seaco_paraformer.model as seaco

    def no_download(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"funasr fetched a hotword URL: {args}")

    monkeypatch.setattr(seaco.requests, "get", no_download)
    (tmp_path / "words.txt").write_text("一丁\n七万\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # where funasr would find it
    engine = _engine(tiny_seaco_model)
    engine.open_stream(1, StreamOptions(hotwords=(word,)))
    (output,) = engine.feed([ChunkItem(1, 0, clip(1, 1.0), True)])
    assert output.error is None
    model = engine._model.model  # funasr's SeacoParaformer, which keeps its last list
    # One word, not in the vocabulary (<unk>, the last token), then SeACo's own <s>.
    unk = len(engine._model.kwargs["token_list"]) - 1
    assert model.hotword_list == [[unk], [1]]


def test_utterances_share_a_call_only_with_the_same_hotwords(tiny_seaco_model: Path) -> None:
    engine = _engine(tiny_seaco_model)
    spy = _Spy(engine._model)
    engine._model = spy
    many = tuple(f"词{i}" for i in range(HOTWORD_FILTER_WORDS))
    words = [FIRST, SECOND, FIRST, (), SECOND, (), many, many]
    clips = [clip(30 + s, 1.0 + 0.02 * s) for s in range(len(words))]  # lengths within 1.25x
    for stream_id, options in enumerate(words):
        engine.open_stream(stream_id, StreamOptions(hotwords=options))
    outputs = engine.feed([ChunkItem(s, 0, c, True) for s, c in enumerate(clips)])
    assert all(o.error is None for o in outputs)
    assert sorted(spy.calls, key=str) == sorted(
        [
            (2, hotword_argument(FIRST)),
            (2, hotword_argument(SECOND)),
            (2, None),  # no words: hotword=None, said (the bias path is skipped)
            # From 50 words SeACo filters them on the call's first utterance: one per call.
            (1, hotword_argument(many)),
            (1, hotword_argument(many)),
        ],
        key=str,
    )
    model = spy.model
    assert [o.text for o in outputs] == [
        generate(model, c, w) for c, w in zip(clips, words, strict=True)
    ]


def test_a_model_without_hotwords_is_never_given_them(tiny_offline_model: Path) -> None:
    engine = _engine(tiny_offline_model)
    spy = _Spy(engine._model)
    engine._model = spy
    audio = clip(2, 1.5)
    engine.open_stream(1, StreamOptions(hotwords=FIRST))
    (output,) = engine.feed([ChunkItem(1, 0, audio, True)])
    assert spy.calls == [(1, NOT_GIVEN)]
    assert output.text == generate(spy.model, audio)


def test_streaming_engines_ignore_hotwords() -> None:
    from workers.engines.paraformer.streaming import ParaformerStreamingEngine

    class _Model:
        def __init__(self) -> None:
            self.kwargs: list[dict[str, Any]] = []

        def generate(self, **kwargs: Any) -> list[dict[str, str]]:
            self.kwargs.append(kwargs)
            return [{"text": "x"}]

    model = _Model()
    engine = ParaformerStreamingEngine(model)
    engine.open_stream(1, StreamOptions(hotwords=FIRST))
    engine.feed([ChunkItem(1, 0, clip(3, 0.6), True)])
    assert "hotword" not in model.kwargs[0]


def _settings(
    model_dir: Path, transport: Literal["shm", "queue"] = "shm", wait_s: float = 0.0
) -> PoolSettings:
    return PoolSettings(
        model=str(model_dir),
        kind=Role.OFFLINE,
        devices=("cpu",),
        transport=transport,
        batch_wait_s=wait_s,
        chunk_deadline_s=10.0,
    )


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["shm", "queue"])
async def test_a_pool_decodes_with_each_streams_hotwords(
    tiny_seaco_model: Path, transport: Literal["shm", "queue"]
) -> None:
    audio = clip(4, 2.0)
    texts: dict[tuple[str, ...], str] = {}
    async with WorkerPool(_settings(tiny_seaco_model, transport)) as pool:
        with within(30):
            for words in (FIRST, (), SECOND):  # no words right after some
                texts[words] = await pool.transcribe(audio, StreamOptions(hotwords=words))
    model = load_automodel(str(tiny_seaco_model), "cpu", 1)
    assert texts == {words: generate(model, audio, words) for words in texts}
    assert texts[()] != texts[FIRST]  # the words reached the worker and steered it


@pytest.mark.anyio
async def test_utterances_with_other_hotwords_in_one_step_each_get_their_own(
    tiny_seaco_model: Path,
) -> None:
    # Under a second each: one piece, the final one, per stream. batch_size then counts the
    # streams whose finals were decoded in the step.
    words = [FIRST, SECOND, FIRST, SECOND]
    clips = [clip(40 + s, 0.9) for s in range(4)]
    finals: list[StreamResult] = [None] * 4  # type: ignore[list-item]

    async def one(pool: WorkerPool, index: int) -> None:
        async with pool.open_stream(StreamOptions(hotwords=words[index])) as stream:
            await stream.finish(clips[index])
            async for result in stream:
                finals[index] = result

    async with WorkerPool(_settings(tiny_seaco_model, wait_s=0.5)) as pool:
        with within(30):
            async with anyio.create_task_group() as group:
                for index in range(4):
                    group.start_soon(one, pool, index)
    assert [f.batch_size for f in finals] == [4] * 4
    model = load_automodel(str(tiny_seaco_model), "cpu", 1)
    expected = [generate(model, c, w) for c, w in zip(clips, words, strict=True)]
    assert [f.text for f in finals] == expected
    # The two sets decode these clips differently: a mix-up would show.
    swapped = [SECOND if w == FIRST else FIRST for w in words]
    assert [generate(model, c, w) for c, w in zip(clips, swapped, strict=True)] != expected


@pytest.mark.anyio
async def test_a_plain_paraformer_pool_ignores_hotwords(tiny_offline_model: Path) -> None:
    audio = clip(5, 1.5)
    async with WorkerPool(_settings(tiny_offline_model)) as pool:
        with within(30):
            plain = await pool.transcribe(audio)
            given = await pool.transcribe(audio, StreamOptions(hotwords=FIRST))
    assert plain
    assert given == plain


@pytest.mark.parametrize(
    "name",
    [
        "paraformer-zh",
        "seaco-paraformer",
        "iic/speech_seaco_paraformer_large_asr_nat-zh-cn-16k-common-vocab8404-pytorch",
    ],
)
def test_the_seed_models_names_find_it_in_the_hub_cache(
    tiny_seaco_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    # Where ModelScope keeps a downloaded model: what a user's machine that reached the hub has.
    model_id = "iic/speech_seaco_paraformer_large_asr_nat-zh-cn-16k-common-vocab8404-pytorch"
    cached = tmp_path / "hub" / "models" / model_id
    cached.parent.mkdir(parents=True)
    cached.symlink_to(tiny_seaco_model, target_is_directory=True)
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path))
    resolved = resolve_model(name, str(tmp_path / "unused"), Role.OFFLINE)
    assert resolved.kind.name == "seaco-paraformer"
    assert select_engine(resolved.kind, "onnx") == "paraformer-offline"  # no export of it
    assert resolved.model_dir is not None
    assert Path(resolved.model_dir).resolve() == tiny_seaco_model.resolve()
    assert "SeacoParaformer" in resolved.description
