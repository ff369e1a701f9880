"""Streaming SenseVoice: every partial is funasr's own decode of exactly the audio it covers,
the final the decode of the whole region, batched across streams, tagged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shared.engines import Role
from shared.messages import EngineSpec, StreamOptions
from tests.live.workers.test_sensevoice import clip, raw_text
from workers.engines import load_engine, select_engine
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.paraformer.streaming import load_automodel
from workers.engines.sensevoice.engine import SenseVoiceEngine, split_tags
from workers.engines.sensevoice.streaming import RedecodingEngine
from workers.models.resolve import resolve_model

pytestmark = pytest.mark.slow

CHUNK = 9600  # 600 ms: chunk_size [0, 10, 5]


def chunks(audio: np.ndarray) -> list[np.ndarray]:
    return [audio[i : i + CHUNK] for i in range(0, len(audio), CHUNK)]


def expected_partials(
    model: object, pieces: list[np.ndarray], window: int, language: str, itn: bool
) -> list[str]:
    """What each partial must say, from funasr's ``generate`` alone: the kept windows' texts
    (each window's last decode), then the open window's decode."""
    kept: list[str] = []
    start = 0
    texts = []
    for end in range(1, len(pieces) + 1):
        audio = np.concatenate(pieces[start:end])
        text, _ = split_tags(raw_text(model, audio, language, itn))
        texts.append(" ".join(t for t in (*kept, text) if t))
        if sum(len(p) for p in pieces[start:end]) >= window:
            kept.append(text)
            start = end
    return texts


@pytest.fixture(scope="module")
def funasr_model(tiny_sensevoice_model: Path) -> object:
    return load_automodel(str(tiny_sensevoice_model), "cpu", 1)


def stream_through(
    engine: RedecodingEngine, streams: dict[int, tuple[np.ndarray, StreamOptions]]
) -> dict[int, list[ChunkOutput]]:
    """Each stream's chunks, one step per chunk with every stream's chunk in it (as a
    worker batches them), the last one final."""
    for stream_id, (_, options) in streams.items():
        engine.open_stream(stream_id, options)
    pieces = {stream_id: chunks(audio) for stream_id, (audio, _) in streams.items()}
    outputs: dict[int, list[ChunkOutput]] = {stream_id: [] for stream_id in streams}
    for seq in range(max(len(p) for p in pieces.values())):
        step = [
            ChunkItem(stream_id, seq, p[seq], seq == len(p) - 1)
            for stream_id, p in pieces.items()
            if seq < len(p)
        ]
        for output in engine.feed(step):
            assert output.error is None, output.error
            outputs[output.stream_id].append(output)
    return outputs


def test_every_partial_and_the_final_equal_funasrs_decode_of_their_audio(
    tiny_sensevoice_model: Path, funasr_model: object
) -> None:
    """Two streams of different lengths share each step; the window is short enough here
    (1.8 s) that the longer one keeps windows, so the kept texts are checked too."""
    spec = EngineSpec("sensevoice-streaming", model_dir=str(tiny_sensevoice_model))
    engine = RedecodingEngine(SenseVoiceEngine.load(spec), window_s=1.8)
    audios = {1: clip(7, 4.5), 2: clip(8, 2.0)}
    options = StreamOptions(language="zh", model_itn=False)
    outputs = stream_through(engine, {n: (audio, options) for n, audio in audios.items()})
    for stream_id, audio in audios.items():
        pieces = chunks(audio)
        *partials, final = outputs[stream_id]
        assert [o.text for o in partials] == expected_partials(
            funasr_model, pieces[:-1], engine.window_cap, "zh", False
        )
        assert (final.final, (final.text, final.decoded.tags)) == (
            True,
            split_tags(raw_text(funasr_model, audio, "zh", False)),
        )
        assert all(o.decoded.tags is not None for o in partials)
    assert engine.active_streams == 0


def test_five_languages_show_their_tags_on_partials(tiny_sensevoice_model: Path) -> None:
    """Five streams in one step, each asking its language: every partial carries the
    language the model wrote, with emotion and event (the synthetic model writes the one
    asked for)."""
    engine = load_engine(EngineSpec("sensevoice-streaming", model_dir=str(tiny_sensevoice_model)))
    assert isinstance(engine, RedecodingEngine)
    languages = ["zh", "en", "yue", "ja", "ko"]
    streams = {
        n: (clip(20 + n, 2.4), StreamOptions(language=language))
        for n, language in enumerate(languages)
    }
    outputs = stream_through(engine, streams)
    for n, language in enumerate(languages):
        for output in outputs[n]:
            assert output.decoded.tags is not None
            assert output.decoded.tags.language == language
            assert output.decoded.tags.emotion
            assert output.decoded.tags.event


def test_a_stream_behind_is_decoded_once_at_its_last_piece(
    tiny_sensevoice_model: Path, funasr_model: object
) -> None:
    """Three chunks of one stream in one step (its worker fell behind): the first two are
    answered with no text, the third with the decode of all three."""
    spec = EngineSpec("sensevoice-streaming", model_dir=str(tiny_sensevoice_model))
    engine = RedecodingEngine(SenseVoiceEngine.load(spec))
    audio = clip(3, 1.8)
    engine.open_stream(5, StreamOptions())
    pieces = chunks(audio)
    outputs = engine.feed([ChunkItem(5, n, p, False) for n, p in enumerate(pieces)])
    assert [o.text for o in outputs[:2]] == ["", ""]
    assert outputs[2].text == split_tags(raw_text(funasr_model, audio, "auto", True))[0]
    (final,) = engine.feed([ChunkItem(5, 3, np.zeros(0, np.int16), True)])
    assert final.text == outputs[2].text  # nothing more heard: the same decode


def test_sensevoice_serves_the_streaming_role_on_its_streaming_engines(
    tiny_sensevoice_model: Path,
) -> None:
    kind = resolve_model(str(tiny_sensevoice_model), "/nonexistent", Role.STREAMING).kind
    assert kind.name == "sensevoice"
    assert select_engine(kind, "torch", Role.STREAMING) == "sensevoice-streaming"
    assert select_engine(kind, "onnx", Role.STREAMING) == "sensevoice-streaming-onnx"
    assert select_engine(kind, "onnx", Role.OFFLINE) == "sensevoice-onnx"
    engine = load_engine(EngineSpec("sensevoice-streaming", model_dir=str(tiny_sensevoice_model)))
    assert engine.capabilities.regions
    assert not engine.capabilities.text_is_delta


def test_the_onnx_streaming_engine_gives_funasrs_text(
    tiny_sensevoice_model: Path, funasr_model: object
) -> None:
    from workers.models.export.offline import export_offline

    export_offline(tiny_sensevoice_model)
    engine = load_engine(
        EngineSpec("sensevoice-streaming-onnx", model_dir=str(tiny_sensevoice_model))
    )
    assert isinstance(engine, RedecodingEngine)
    audio = clip(11, 3.0)
    options = StreamOptions(language="en", model_itn=True)
    outputs = stream_through(engine, {1: (audio, options)})[1]
    pieces = chunks(audio)
    assert [o.text for o in outputs[:-1]] == expected_partials(
        funasr_model, pieces[:-1], engine.window_cap, "en", True
    )
    assert outputs[-1].text == split_tags(raw_text(funasr_model, audio, "en", True))[0]


def test_without_a_final_decode_the_final_is_the_last_partial(
    tiny_sensevoice_model: Path,
) -> None:
    """A 2pass sentence's streaming pass: its offline pass decodes the sentence whole, so
    the final piece costs no decode (``StreamOptions.final_decode``)."""
    spec = EngineSpec("sensevoice-streaming", model_dir=str(tiny_sensevoice_model))
    engine = RedecodingEngine(SenseVoiceEngine.load(spec))
    options = StreamOptions(final_decode=False)
    *partials, final = stream_through(engine, {1: (clip(5, 1.5), options)})[1]
    assert partials[-1].text
    assert (final.final, final.decoded) == (True, partials[-1].decoded)
