"""The CT-Transformer under ONNX Runtime against funasr's own ``generate``, on the tiny
synthetic model and two variants of it: one that never ends a sentence (so that whole
mini-sentences are carried over, and cut at a comma past 200 words), one word-level with
a jieba dictionary (as the real ``ct-punc``)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from shared.engines import Role
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from workers.engines import load_engine
from workers.engines.base import ChunkItem
from workers.engines.paraformer.offline import ParaformerOfflineEngine
from workers.engines.paraformer.streaming import load_automodel
from workers.engines.punctuation.ct_transformer import (
    COMMA,
    FULL_STOP,
    QUESTION_MARK,
    FunasrPunctuator,
    OnnxPunctuator,
    Punctuated,
    Punctuator,
    Words,
    load_punctuator,
)
from workers.engines.runtime.onnx_files import PuncOnnxFiles, punc_up_to_date
from workers.models.export.punctuation import export_punc
from workers.models.synthetic.base import TINY_VOCAB, build_tokens
from workers.pool import WorkerPool

pytestmark = pytest.mark.slow

MARKS = (COMMA, FULL_STOP, QUESTION_MARK, "\u3001", ",", ".", "?")
CHARACTERS = build_tokens(TINY_VOCAB)[3:-1]  # the tiny vocabulary's CJK characters
# Class ids of funasr's punc_list (workers.models.synthetic.companions.PUNC_LIST).
COMMA_ID, FULL_STOP_ID, QUESTION_MARK_ID = 2, 3, 4


def chinese(seed: int, length: int) -> str:
    rng = np.random.default_rng(seed)
    return "".join(rng.choice(CHARACTERS, length))


def texts_for_tests() -> list[str]:
    """Short, exactly one mini-sentence (20), one word more, several mini-sentences; ASCII
    words among the characters; characters the vocabulary lacks; empty."""
    texts = [chinese(length, length) for length in (1, 2, 3, 19, 20, 21, 39, 40, 41, 60, 97)]
    texts += [chinese(1000 + k, 230) for k in range(2)]
    texts += [
        chinese(7, 8) + " hello world " + chinese(8, 15) + "iPhone" + chinese(9, 3) + " ok",
        "a b c d e f g h i j k l m n o p q r s t u v w x y z",
        "hello",
        chinese(10, 12) + "\u9f8d\u9f98" + chinese(11, 12),  # two unknown characters
        chinese(12, 5) + " 2024 " + chinese(13, 30),
        "",
        "   ",
    ]
    return texts


def inner_marks(text: str) -> int:
    """Punctuation marks before the text's last character (the last one funasr adds)."""
    return sum(text[:-1].count(mark) for mark in MARKS)


@pytest.fixture(scope="module")
def exported(tiny_punc_model: Path) -> Path:
    export_punc(tiny_punc_model, threads=1)
    return tiny_punc_model


def reference_and_onnx(model_dir: Path) -> tuple[FunasrPunctuator, OnnxPunctuator]:
    return FunasrPunctuator.load(str(model_dir), "cpu", 1), OnnxPunctuator.load(model_dir, "cpu", 1)


def variant(source: Path, target: Path, biases: dict[int, float]) -> Path:
    """A copy of the synthetic model whose classifier is biased (the same random weights
    otherwise): a bias of -100 makes a class never chosen."""
    import torch

    shutil.copytree(source, target, ignore=shutil.ignore_patterns("onnx-gateway"))
    state = torch.load(target / "model.pt", map_location="cpu")
    for index, bias in biases.items():
        state["decoder.bias"][index] = bias
    torch.save(state, target / "model.pt")
    return target


def assert_equal_to_funasr(
    reference: Punctuator, onnx: Punctuator, texts: list[str]
) -> list[Punctuated]:
    """The ONNX punctuator's answers, all texts in one call, equal funasr's one by one."""
    expected = reference.punctuate(texts)
    got = onnx.punctuate(texts)
    for text, theirs, ours in zip(texts, expected, got, strict=True):
        assert ours == theirs, text
    return got


# -- export ------------------------------------------------------------------------------


def test_the_export_is_made_once_and_found_up_to_date(exported: Path, tmp_path: Path) -> None:
    files = PuncOnnxFiles.of(exported)
    assert files.model.stat().st_size > 0
    assert punc_up_to_date(exported)
    meta = json.loads(files.meta.read_text(encoding="utf-8"))
    assert meta["tokens"] == json.loads((exported / "tokens.json").read_text(encoding="utf-8"))
    assert not meta["word_level"]
    before = files.model.stat().st_mtime_ns
    started = time.monotonic()
    export_punc(exported)  # every start of a pool that punctuates under ONNX may call it
    assert time.monotonic() - started < 1.0
    assert files.model.stat().st_mtime_ns == before
    copy = Path(shutil.copytree(exported, tmp_path / "copy"))
    assert punc_up_to_date(copy)
    (copy / "tokens.json").write_text((copy / "tokens.json").read_text() + "\n")
    assert not punc_up_to_date(copy)  # a changed vocabulary is exported again
    with pytest.raises(FileNotFoundError, match=r"workers\.models\.export\.punctuation"):
        OnnxPunctuator.load(copy, "cpu", 1)


# -- the text, against funasr --------------------------------------------------------------


def test_onnx_punctuation_equals_funasr_for_every_kind_of_text(exported: Path) -> None:
    reference, onnx = reference_and_onnx(exported)
    texts = texts_for_tests()
    got = assert_equal_to_funasr(reference, onnx, texts)
    by_text = dict(zip(texts, got, strict=True))
    assert by_text[""] == Punctuated("")
    assert by_text["   "] == Punctuated("")
    # The synthetic model punctuates inside the texts, so that the mini-sentences' carried
    # sentences (and where each one is cut) decide the text.
    long_texts = [t for t in texts if len(t) > 40]
    assert all(inner_marks(by_text[t].text) >= 5 for t in long_texts)
    assert all(p.error is None and p.text[-1] in MARKS for t, p in by_text.items() if t.strip())


def test_batched_equals_alone(exported: Path) -> None:
    onnx = OnnxPunctuator.load(exported, "cpu", 1)
    texts = texts_for_tests()
    alone = [onnx.punctuate([text])[0] for text in texts]
    assert onnx.punctuate(texts) == alone
    assert onnx.punctuate(texts[::-1]) == alone[::-1]


def test_one_failing_text_fails_alone_with_funasrs_error(exported: Path) -> None:
    reference, onnx = reference_and_onnx(exported)
    broken = chinese(20, 10) + "\ud800"  # a lone surrogate: funasr's split_words cannot encode it
    texts = [chinese(21, 30), broken, chinese(22, 50)]
    got = assert_equal_to_funasr(reference, onnx, texts)
    assert got[1].error is not None
    assert got[1].error.startswith("punctuation error: UnicodeEncodeError")
    assert got[0].error is None
    assert got[2].error is None


def test_whole_mini_sentences_are_carried_and_cut_at_a_comma(
    tiny_punc_model: Path, tmp_path: Path
) -> None:
    """A model that never ends a sentence: each mini-sentence is carried whole into the
    next, until past 200 words it is cut at its last comma (funasr's
    cache_pop_trigger_limit); the text's last comma becomes a full stop."""
    model_dir = variant(
        tiny_punc_model, tmp_path / "no-sentence-ends", {FULL_STOP_ID: -100, QUESTION_MARK_ID: -100}
    )
    export_punc(model_dir, threads=1)
    reference, onnx = reference_and_onnx(model_dir)
    texts = [chinese(30 + k, length) for k, length in enumerate((25, 60, 199, 230, 450, 700))]
    got = assert_equal_to_funasr(reference, onnx, texts)
    # Only the cuts past 200 words (and the end) close a sentence.
    assert [p.text.count(FULL_STOP) for p in got[:3]] == [1, 1, 1]
    assert all(p.text.count(FULL_STOP) > 1 for p in got[4:])
    assert all(p.text.count(COMMA) > 10 for p in got[2:])


def test_rare_sentence_ends_on_many_texts(tiny_punc_model: Path, tmp_path: Path) -> None:
    """A model that seldom ends a sentence, on many texts of several mini-sentences: the
    carried sentences are long, and now and then a mini-sentence's only sentence end is
    at its second word, which funasr does not look at (a few of these texts have one)."""
    model_dir = variant(
        tiny_punc_model, tmp_path / "rare-sentence-ends", {FULL_STOP_ID: -1, QUESTION_MARK_ID: -1}
    )
    export_punc(model_dir, threads=1)
    reference, onnx = reference_and_onnx(model_dir)
    rng = np.random.default_rng(5)
    texts = [chinese(100 + k, int(n)) for k, n in enumerate(rng.integers(21, 120, 300))]
    assert_equal_to_funasr(reference, onnx, texts)


def test_a_word_level_model_splits_with_its_jieba_dictionary(
    tiny_punc_model: Path, tmp_path: Path
) -> None:
    """As the real ct-punc (vocab471067): a jieba_usr_dict in the directory makes funasr
    cut Chinese into words, English words kept whole; a word's id is its own."""
    model_dir = Path(
        shutil.copytree(
            tiny_punc_model, tmp_path / "word-level", ignore=shutil.ignore_patterns("onnx-gateway")
        )
    )
    tokens = json.loads((model_dir / "tokens.json").read_text(encoding="utf-8"))
    words = [CHARACTERS[k] + CHARACTERS[k + 1] for k in range(0, 40, 2)]
    words += [CHARACTERS[k] + CHARACTERS[k + 5] + CHARACTERS[k + 9] for k in range(40, 60, 4)]
    tokens[-1 - len(words) : -1] = words  # in place of the last characters: the same size
    (model_dir / "tokens.json").write_text(json.dumps(tokens, ensure_ascii=False))
    (model_dir / "jieba_usr_dict").write_text("".join(f"{w} 10000\n" for w in words))
    export_punc(model_dir, threads=1)
    assert json.loads(PuncOnnxFiles.of(model_dir).meta.read_text(encoding="utf-8"))["word_level"]
    reference, onnx = reference_and_onnx(model_dir)
    rng = np.random.default_rng(40)
    texts = ["".join(rng.choice(words + CHARACTERS[:60], n)) for n in (3, 12, 25, 60)]
    texts += [
        words[0] + words[1] + " hello world " + words[2] + CHARACTERS[3] + "iPhone " + words[3],
        "hello " + "".join(words[:15]) + " it's " + "".join(words[5:30]),
    ]
    assert_equal_to_funasr(reference, onnx, texts)
    # The texts are cut into the dictionary's words, which are in the vocabulary.
    cut = Words(tokens, tokens.index("<unk>"), model_dir / "jieba_usr_dict").split(texts[-1])
    assert len(set(cut) & set(words)) >= 5
    assert {"hello", "it's"} <= set(cut)  # English words whole


def test_load_punctuator_picks_the_runtime(exported: Path) -> None:
    assert isinstance(load_punctuator(str(exported), "cpu", 1, onnx=True), OnnxPunctuator)
    assert isinstance(load_punctuator(str(exported), "cpu", 1, onnx=False), FunasrPunctuator)


# -- in the offline engine -----------------------------------------------------------------


def clip(seed: int, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 3000 * np.sin(2 * np.pi * (200 + 60 * seed) * t)
    return (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)


def test_the_offline_engine_punctuates_the_same_under_onnx(
    tiny_offline_model: Path, exported: Path
) -> None:
    """The offline engine's final texts, punctuated by funasr (the engine as load_engine
    builds it) and by the ONNX punctuator, all utterances of the step in one call."""
    spec = EngineSpec(
        "paraformer-offline",
        model_dir=str(tiny_offline_model),
        punc_model_dir=str(exported),
    )
    with_funasr = load_engine(spec)
    with_onnx = ParaformerOfflineEngine(
        load_automodel(str(tiny_offline_model), "cpu", 1), OnnxPunctuator.load(exported, "cpu", 1)
    )
    clips = [clip(seed, seconds) for seed, seconds in enumerate((1.0, 6.0, 10.0, 6.5, 0.0))]
    finals = {}
    for name, engine in (("funasr", with_funasr), ("onnx", with_onnx)):
        for stream_id in range(len(clips)):
            engine.open_stream(stream_id, StreamOptions())
        outputs = engine.feed([ChunkItem(s, 0, c, True) for s, c in enumerate(clips)])
        assert all(o.final and o.error is None for o in outputs)
        finals[name] = [o.text for o in outputs]
    assert finals["onnx"] == finals["funasr"]
    assert finals["onnx"][-1] == ""  # no audio, no text, nothing to punctuate
    assert all(inner_marks(text) >= 3 for text in finals["onnx"][1:4])


@pytest.mark.anyio
async def test_an_onnx_offline_pool_exports_its_punctuation_model_at_start_up(
    tiny_offline_model: Path, tiny_punc_model: Path, tmp_path: Path
) -> None:
    # Copies without exports: the pool's start exports both, in children.
    model = tmp_path / "offline"
    punc = tmp_path / "punc"
    shutil.copytree(tiny_offline_model, model, ignore=shutil.ignore_patterns("onnx-*"))
    shutil.copytree(tiny_punc_model, punc, ignore=shutil.ignore_patterns("onnx-*"))
    assert not punc_up_to_date(punc)
    audio = clip(3, 2.0)
    texts = []
    for runtime in ("torch", "onnx"):
        settings = PoolSettings(
            model=str(model),
            kind=Role.OFFLINE,
            punc_model=str(punc),
            runtime=runtime,
            devices=("cpu",),
        )
        async with WorkerPool(settings) as pool:
            texts.append(await pool.transcribe(audio))
    assert punc_up_to_date(punc)
    assert texts[0]
    assert texts[0] == texts[1]  # funasr's decode and punctuation, and ours under ONNX
