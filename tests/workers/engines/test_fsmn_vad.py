"""The FSMN-VAD engine and the synthetic VAD / punctuation models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.engines import Role
from shared.errors import WorkerLoadError
from shared.messages import EngineSpec, StreamOptions
from tests.helpers.vad import SENTENCE_ENDS, funasr_vad, spoken
from workers.engines import load_engine
from workers.engines.base import ChunkItem
from workers.engines.paraformer.streaming import load_automodel
from workers.engines.runtime.model_dir import model_class
from workers.models.resolve import resolve_model

pytestmark = pytest.mark.slow

AUDIO_PARTS = (("quiet", 0.5), ("speech", 1.5), ("quiet", 1.2), ("speech", 1.0), ("quiet", 1.0))


def test_the_engine_reports_what_funasr_reports_piece_by_piece(tiny_vad_model: Path) -> None:
    audio = spoken(0, *AUDIO_PARTS)
    engine = load_engine(EngineSpec(engine="fsmn-vad", model_dir=str(tiny_vad_model)))
    engine.open_stream(1, StreamOptions())
    reference = load_automodel(str(tiny_vad_model), "cpu", 1)
    cache: dict[str, Any] = {}
    step = 3200
    ours, theirs = [], []
    for seq, start in enumerate(range(0, len(audio), step)):
        piece = audio[start : start + step]
        (output,) = engine.feed([ChunkItem(1, seq, piece, False)])
        assert output.text == ""
        ours.append([list(segment) for segment in output.decoded.segments])
        theirs.append(funasr_vad(reference, piece, cache))
    assert ours == theirs
    events = [segment for piece in ours for segment in piece]
    # The synthetic VAD hears both sentences: two starts, two ends, in the silences.
    starts = [beg for beg, _ in events if beg != -1]
    ends = [end for _, end in events if end != -1]
    assert len(starts) == 2, events
    assert len(ends) == 2, events
    # Speech at 0.5-2.0 s and 3.2-4.2 s; starts look back 200 ms, ends look ahead 100 ms.
    assert 0 < starts[0] <= 500, events
    assert 2000 < ends[0] < 3200, events
    assert 2700 < starts[1] <= 3200, events
    assert ends[1] > 4200, events


def test_a_final_piece_frees_the_stream_and_unknown_streams_fail(tiny_vad_model: Path) -> None:
    engine = load_engine(EngineSpec(engine="fsmn-vad", model_dir=str(tiny_vad_model)))
    engine.open_stream(1, StreamOptions())
    audio = spoken(1, ("speech", 0.5))
    (output,) = engine.feed([ChunkItem(1, 0, audio, True)])
    assert output.final
    assert output.error is None
    assert engine.active_streams == 0
    (unknown,) = engine.feed([ChunkItem(1, 1, audio, False)])
    assert unknown.error is not None


def test_synthetic_companions_have_the_real_model_classes(
    tiny_vad_model: Path, tiny_punc_model: Path
) -> None:
    assert model_class(tiny_vad_model) == "FsmnVADStreaming"
    assert model_class(tiny_punc_model) == "CTTransformer"
    punctuated = load_automodel(str(tiny_punc_model), "cpu", 1).generate(
        input="一丁七万丈三上下不与丐丑专且丕世丘丙业丛东丝丞丢两严丧丨个丫丬中", disable_pbar=True
    )[0]["text"]
    assert punctuated[-1] in SENTENCE_ENDS  # funasr closes a text with one of these
    assert "<unk>" not in punctuated


def test_each_kind_refuses_a_model_of_another_kind(
    tiny_vad_model: Path, tiny_punc_model: Path, model_cache: Path
) -> None:
    with pytest.raises(WorkerLoadError, match=r"ASR_VAD_MODEL=.*not an FSMN-VAD"):
        resolve_model(str(tiny_punc_model), str(model_cache), Role.VAD)
    with pytest.raises(WorkerLoadError, match=r"ASR_MODEL=.*not a streaming Paraformer"):
        resolve_model(str(tiny_vad_model), str(model_cache), Role.STREAMING)
    with pytest.raises(WorkerLoadError, match=r"ASR_PUNC_MODEL=.*not a CT-Transformer"):
        resolve_model(str(tiny_vad_model), str(model_cache), Role.PUNCTUATION)
    resolved = resolve_model(str(tiny_vad_model), str(model_cache), Role.VAD)
    assert resolved.kind.name == "fsmn-vad"
