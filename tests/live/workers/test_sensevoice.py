"""SenseVoiceSmall: the synthetic build, and the engine against funasr's own generate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from shared.engines import Role
from shared.messages import EngineSpec, SpeechTags, StreamOptions
from workers.engines import select_engine
from workers.engines.base import ChunkItem
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.runtime.model_dir import model_class
from workers.engines.sensevoice.engine import SenseVoiceEngine, split_tags
from workers.models.resolve import resolve_model
from workers.models.synthetic.sensevoice import (
    BPE_MODEL,
    EMOTION_TAGS,
    EVENT_TAGS,
    LANGUAGE_TAGS,
    NOSPEECH_TAG,
    TEXT_NORM_TAGS,
    VOCAB_SIZE,
)

pytestmark = pytest.mark.slow

REFERENCE = Path(__file__).parents[3] / ".." / "shared" / "reference" / "sensevoice-small.yaml"


def clip(seed: int, seconds: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 3000 * np.sin(2 * np.pi * (200 + 60 * seed) * t)
    return (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)


def raw_text(model: object, audio: np.ndarray, language: str, itn: bool) -> str:
    """funasr's own decode of one utterance, tags included."""
    result = model.generate(  # type: ignore[attr-defined]
        input=to_float(audio), language=language, use_itn=itn, disable_pbar=True
    )
    return str(result[0]["text"])


def test_the_build_has_the_real_architecture_and_token_ids(tiny_sensevoice_model: Path) -> None:
    import sentencepiece

    assert model_class(tiny_sensevoice_model) == "SenseVoiceSmall"
    config = yaml.safe_load((tiny_sensevoice_model / "config.yaml").read_text())
    if REFERENCE.is_file():  # the team's reference (outside the repository)
        reference = yaml.safe_load(REFERENCE.read_text())
        for key in ("encoder", "model", "tokenizer", "frontend"):
            assert config[key] == reference[key]
        shared = set(reference["encoder_conf"]) - {"output_size", "linear_units", "num_blocks"}
        for key in shared - {"tp_blocks"}:
            assert config["encoder_conf"][key] == reference["encoder_conf"][key], key
    metas = json.loads((tiny_sensevoice_model / "configuration.json").read_text())
    assert metas["file_path_metas"]["tokenizer_conf"]["bpemodel"] == BPE_MODEL
    pieces = sentencepiece.SentencePieceProcessor(model_file=str(tiny_sensevoice_model / BPE_MODEL))
    assert pieces.get_piece_size() == VOCAB_SIZE
    # The ids funasr's SenseVoiceSmall reads and writes (its lid_int_dict, emo_dict,
    # textnorm_int_dict), as the real vocabulary has them.
    expected = {
        24884: "<|zh|>",
        24885: "<|en|>",
        24888: "<|yue|>",
        24892: "<|ja|>",
        24896: "<|ko|>",
        24992: "<|nospeech|>",
        25001: "<|HAPPY|>",
        25002: "<|SAD|>",
        25003: "<|ANGRY|>",
        25004: "<|NEUTRAL|>",
        25009: "<|EMO_UNKNOWN|>",
        25016: "<|withitn|>",
        25017: "<|woitn|>",
    }
    for token_id, piece in expected.items():
        assert pieces.id_to_piece(token_id) == piece
    assert LANGUAGE_TAGS["zh"] == 24884
    assert NOSPEECH_TAG == 24992
    assert TEXT_NORM_TAGS["woitn"] == 25017
    assert EMOTION_TAGS["EMO_UNKNOWN"] == 25009
    assert pieces.id_to_piece(EVENT_TAGS["Speech"]) == "<|Speech|>"


def test_the_synthetic_model_writes_its_tags_first(tiny_sensevoice_model: Path) -> None:
    """The four prompt frames write language, emotion, event and text norm, as the trained
    model does: the language asked for, ``auto`` finding zh, and the ITN choice."""
    model = load_automodel(str(tiny_sensevoice_model), "cpu", 1)
    audio = clip(3, 2.0)
    for language, itn in [("en", True), ("ja", False), ("auto", False), ("ko", True)]:
        heard = "zh" if language == "auto" else language
        norm = "withitn" if itn else "woitn"
        raw = raw_text(model, audio, language, itn)
        assert raw.startswith(f"<|{heard}|><|NEUTRAL|><|Speech|><|{norm}|>"), raw
        assert len(raw) > 40  # text after the tags, not the tags alone


def test_split_tags_takes_every_tag_out_of_the_text() -> None:
    raw = "<|yue|><|HAPPY|><|Laughter|><|withitn|>你好<|BGM|>\uff0c世界<|en|>\u3002"
    assert split_tags(raw) == ("你好\uff0c世界\u3002", SpeechTags("yue", "happy", "laughter"))
    assert split_tags("<|SPECIAL_TOKEN_3|>hello") == ("hello", SpeechTags())
    assert split_tags("plain text") == ("plain text", SpeechTags())


def test_one_utterance_equals_funasrs_generate(tiny_sensevoice_model: Path) -> None:
    engine = SenseVoiceEngine.load(EngineSpec("sensevoice", model_dir=str(tiny_sensevoice_model)))
    model = load_automodel(str(tiny_sensevoice_model), "cpu", 1)
    audio = clip(5, 2.5)
    engine.open_stream(1, StreamOptions(language="en", model_itn=False))
    assert engine.feed([ChunkItem(1, 0, audio[:8000], False)])[0].text == ""
    (final,) = engine.feed([ChunkItem(1, 1, audio[8000:], True)])
    text, tags = split_tags(raw_text(model, audio, "en", False))
    assert (final.text, final.decoded.tags) == (text, tags)
    assert tags.language == "en"
    assert "<|" not in final.text
    assert final.text
    assert engine.active_streams == 0


def test_finals_in_one_step_are_batched_and_equal_generate_alone(
    tiny_sensevoice_model: Path,
) -> None:
    """Utterances ending together share a generate call when they share a language, an ITN
    choice and a length (within 1.25x); every text equals funasr's decode of it alone."""
    engine = SenseVoiceEngine.load(EngineSpec("sensevoice", model_dir=str(tiny_sensevoice_model)))
    model = load_automodel(str(tiny_sensevoice_model), "cpu", 1)
    calls: list[int] = []
    generate = model.generate

    def counted(**kwargs: object) -> object:
        calls.append(len(kwargs["input"]))  # type: ignore[arg-type]
        return generate(**kwargs)

    engine._model.generate = counted  # the same model; only its calls are counted
    asked = [("zh", True, 2.0), ("zh", True, 2.2), ("en", True, 2.1), ("zh", False, 2.0)]
    asked += [("zh", True, 1.0)]  # shorter than 2.0 / 1.25: a call of its own
    clips = [clip(20 + n, seconds) for n, (_, _, seconds) in enumerate(asked)]
    for n, (language, itn, _) in enumerate(asked):
        engine.open_stream(n, StreamOptions(language=language, model_itn=itn))
    outputs = engine.feed([ChunkItem(n, 0, audio, True) for n, audio in enumerate(clips)])
    assert sorted(calls) == [1, 1, 1, 2]
    for output, (language, itn, _), audio in zip(outputs, asked, clips, strict=True):
        assert (output.text, output.decoded.tags) == split_tags(
            raw_text(model, audio, language, itn)
        )
        assert output.decoded.tags is not None
        assert output.decoded.tags.language == language


def test_an_empty_utterance_has_no_text_and_no_tags(tiny_sensevoice_model: Path) -> None:
    engine = SenseVoiceEngine.load(EngineSpec("sensevoice", model_dir=str(tiny_sensevoice_model)))
    engine.open_stream(1, StreamOptions())
    (final,) = engine.feed([ChunkItem(1, 0, np.zeros(0, np.int16), True)])
    assert final.final
    assert final.text == ""
    assert final.decoded.tags is None
    assert final.error is None


def test_a_sensevoice_directory_resolves_to_its_engine(tiny_sensevoice_model: Path) -> None:
    resolved = resolve_model(str(tiny_sensevoice_model), "/nonexistent", Role.OFFLINE)
    assert resolved.kind.name == "sensevoice"
    assert select_engine(resolved.kind, "torch") == "sensevoice"
    assert "SenseVoiceSmall" in resolved.description


@pytest.fixture(scope="module")
def exported(tiny_sensevoice_model: Path) -> Path:
    from workers.models.export.offline import export_offline

    export_offline(tiny_sensevoice_model)
    return tiny_sensevoice_model


def test_the_onnx_engine_gives_funasrs_text_alone_and_batched(exported: Path) -> None:
    """funasr's own export under ONNX Runtime: every text and tag equals funasr's PyTorch
    generate on the utterance alone, whether the utterances share a call or not."""
    from workers.engines.sensevoice.onnx_engine import SenseVoiceOnnxEngine

    engine = SenseVoiceOnnxEngine.load(EngineSpec("sensevoice-onnx", model_dir=str(exported)))
    model = load_automodel(str(exported), "cpu", 1)
    asked = [("zh", True, 2.0), ("zh", True, 2.2), ("en", False, 3.0), ("auto", True, 0.6)]
    clips = [clip(40 + n, seconds) for n, (_, _, seconds) in enumerate(asked)]
    for n, (language, itn, _) in enumerate(asked):
        engine.open_stream(n, StreamOptions(language=language, model_itn=itn))
    outputs = engine.feed([ChunkItem(n, 0, audio, True) for n, audio in enumerate(clips)])
    for output, (language, itn, _), audio in zip(outputs, asked, clips, strict=True):
        assert output.error is None
        assert (output.text, output.decoded.tags) == split_tags(
            raw_text(model, audio, language, itn)
        )
        assert output.text


def test_the_offline_onnx_runtime_puts_sensevoice_on_its_onnx_engine(exported: Path) -> None:
    from workers.engines import needs_onnx_export, select_engine

    kind = resolve_model(str(exported), "/nonexistent", Role.OFFLINE).kind
    engine = select_engine(kind, "onnx")
    assert engine == "sensevoice-onnx"
    assert needs_onnx_export(engine)
    assert select_engine(kind, "openvino") == "sensevoice-onnx"  # OpenVINO's line: onnx
    assert select_engine(kind, "torch") == "sensevoice"


def test_an_int8_export_is_refused_in_one_line(exported: Path) -> None:
    """onnxruntime's static quantization fails on SenseVoice's graph: asking for int8 says
    so, rather than serving fp32 under another name."""
    from workers.models.export.offline import export_offline

    with pytest.raises(ValueError, match="fp32 only"):
        export_offline(exported, int8=True)
