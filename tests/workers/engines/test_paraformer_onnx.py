"""The ONNX engines on the tiny synthetic model: the export, and each engine's text
(ONNX Runtime's and OpenVINO's, on the same graphs) against PyTorch's and against itself
batched."""

from __future__ import annotations

import difflib
import os
import time
from pathlib import Path

import pytest

from shared.engines import Precision
from shared.messages import EngineSpec, StreamOptions
from tests.helpers.paraformer_onnx import NO_LOOK_BACK, NO_OPENVINO, one_stream, pieces, speech_like
from workers.engines.base import ChunkItem
from workers.engines.paraformer.streaming import ParaformerStreamingEngine
from workers.engines.paraformer.streaming_onnx import ParaformerOnnxEngine
from workers.engines.paraformer.streaming_openvino import ParaformerOpenVinoEngine
from workers.engines.runtime.onnx_files import OnnxFiles, up_to_date
from workers.models.export.paraformer import export

pytestmark = pytest.mark.slow

ENGINES = [ParaformerOnnxEngine, pytest.param(ParaformerOpenVinoEngine, marks=NO_OPENVINO)]


@pytest.fixture(scope="module")
def exported(tiny_streaming_model: Path) -> Path:
    export(tiny_streaming_model, int8=True, threads=1)
    export(tiny_streaming_model, int8=True, threads=1, qdq=True)
    return tiny_streaming_model


# -- export ------------------------------------------------------------------------------


def test_export_writes_each_precision_and_int8_form_once(exported: Path) -> None:
    forms: list[tuple[Precision, bool]] = [("fp32", False), ("int8", False), ("int8", True)]
    for precision, qdq in forms:
        files = OnnxFiles.of(exported, precision, qdq)
        assert files.encoder.stat().st_size > 0
        assert files.decoder.stat().st_size > 0
        assert up_to_date(exported, precision, qdq)
    assert OnnxFiles.of(exported, "int8", True).encoder != OnnxFiles.of(exported, "int8").encoder
    graphs = [OnnxFiles.of(exported, "fp32").encoder, OnnxFiles.of(exported, "int8", True).encoder]
    before = [graph.stat().st_mtime_ns for graph in graphs]
    started = time.monotonic()
    export(exported, int8=True, qdq=True)  # every gateway start makes this call
    assert time.monotonic() - started < 1.0
    assert [graph.stat().st_mtime_ns for graph in graphs] == before


def test_a_changed_model_is_exported_again(tmp_path: Path, exported: Path) -> None:
    copy = tmp_path / "model"
    copy.mkdir()
    for name in ("config.yaml", "am.mvn", "model.pt", "tokens.json"):
        (copy / name).write_bytes((exported / name).read_bytes())
    export(copy)
    assert up_to_date(copy, "fp32")
    assert not up_to_date(copy, "int8")  # not asked for
    assert not up_to_date(copy, "int8", qdq=True)
    later = time.time() + 10
    os.utime(copy / "model.pt", (later, later))  # new weights
    assert not up_to_date(copy, "fp32")


def test_the_engines_refuse_a_missing_export(tmp_path: Path) -> None:
    spec = EngineSpec("paraformer-onnx", model_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"python -m workers\.models\.export"):
        ParaformerOnnxEngine.load(spec)
    spec = EngineSpec("paraformer-openvino", model_dir=str(tmp_path), precision="int8")
    with pytest.raises(FileNotFoundError, match=r"int8 QDQ .* --int8 --qdq$"):
        ParaformerOpenVinoEngine.load(spec)


def test_openvino_refuses_a_gpu(exported: Path) -> None:
    with pytest.raises(ValueError, match="CPU only"):
        ParaformerOpenVinoEngine(exported, "fp32", "cuda:0", 1)


# -- fidelity: every test from here runs once per engine ---------------------------------


@pytest.fixture(scope="module", params=ENGINES, ids=lambda engine: engine.name)
def fp32(request: pytest.FixtureRequest, exported: Path) -> ParaformerOnnxEngine:
    engine: type[ParaformerOnnxEngine] = request.param
    return engine(exported, "fp32", "cpu", 1)


def test_fp32_equals_pytorch_with_look_back_0_chunk_by_chunk(
    exported: Path, fp32: ParaformerOnnxEngine
) -> None:
    torch_engine = ParaformerStreamingEngine.load(EngineSpec("paraformer", model_dir=str(exported)))
    emitted = 0
    for seed in range(5):
        audio = speech_like(seed, chunks=3 + seed, extra=977 * seed)
        expected = one_stream(torch_engine, audio, 1)
        assert one_stream(fp32, audio, 100 + seed) == expected, seed
        emitted += sum(len(text) for text in expected)
    assert emitted > 20  # the comparison is of real text, not of empty strings


def test_batched_equals_single_stream_with_staggered_starts(fp32: ParaformerOnnxEngine) -> None:
    """8 streams, two starting at each step, different lengths and token rates: every
    chunk's text equals the same stream decoded alone."""
    audios = [speech_like(100 + s, chunks=3 + s % 5, extra=1000 * s) for s in range(8)]
    alone = [one_stream(fp32, audio, 1000 + s) for s, audio in enumerate(audios)]
    for s in range(8):
        fp32.open_stream(s, NO_LOOK_BACK)
    batched: list[list[str]] = [[] for _ in audios]
    uneven_steps = 0
    for step in range(20):
        items = []
        for s, audio in enumerate(audios):
            cut = pieces(audio)
            k = step - s // 2
            if 0 <= k < len(cut):
                items.append(ChunkItem(s, k, cut[k], k == len(cut) - 1))
        if not items:
            break
        outputs = fp32.feed(items)
        assert [o.stream_id for o in outputs] == [i.stream_id for i in items]
        uneven_steps += len({len(o.text) for o in outputs}) > 1
        for output in outputs:
            batched[output.stream_id].append(output.text)
    assert batched == alone
    # Streams emitted different numbers of tokens in one call: the padded decoder state
    # that the stock export would keep is exercised, not avoided.
    assert uneven_steps >= 3
    assert fp32.active_streams == 0  # every final freed its stream


def test_look_back_is_accepted_and_decoded_as_0(fp32: ParaformerOnnxEngine) -> None:
    audio = speech_like(7, chunks=4, extra=0)
    with_look_back = StreamOptions((5, 10, 5), encoder_chunk_look_back=4, decoder_chunk_look_back=1)
    assert one_stream(fp32, audio, 1, with_look_back) == one_stream(fp32, audio, 2)


def test_int8_is_close_to_fp32_and_batch_invariant(
    exported: Path, fp32: ParaformerOnnxEngine
) -> None:
    """Static int8 (calibrated scales): near fp32, not equal; the same batched or alone.
    (ONNX Runtime's on its QOperator graphs, OpenVINO's on the QDQ ones.)"""
    int8 = type(fp32)(exported, "int8", "cpu", 1)
    reference = hypothesis = ""
    for seed in range(4):
        audio = speech_like(seed, chunks=5, extra=0)
        reference += "".join(one_stream(fp32, audio, 1))
        hypothesis += "".join(one_stream(int8, audio, 1))
    similarity = difflib.SequenceMatcher(None, reference, hypothesis).ratio()
    print(f"int8 against fp32: {similarity:.2f} similar over {len(reference)} characters")
    assert len(hypothesis) > 0
    assert similarity > 0.5

    audios = [speech_like(300 + s, chunks=3 + s % 3, extra=700 * s) for s in range(6)]
    alone = [one_stream(int8, audio, 2000 + s) for s, audio in enumerate(audios)]
    for s in range(6):
        int8.open_stream(s, NO_LOOK_BACK)
    batched: list[list[str]] = [[] for _ in audios]
    for step in range(12):
        items = [
            ChunkItem(s, step - s, pieces(a)[step - s], step - s == len(pieces(a)) - 1)
            for s, a in enumerate(audios)
            if 0 <= step - s < len(pieces(a))
        ]
        for output in int8.feed(items):
            batched[output.stream_id].append(output.text)
    assert batched == alone


def test_unknown_stream_and_engine_errors_fail_only_their_stream(
    fp32: ParaformerOnnxEngine,
) -> None:
    fp32.open_stream(1, NO_LOOK_BACK)
    audio = speech_like(1, chunks=1, extra=0)
    outputs = fp32.feed([ChunkItem(99, 0, audio, False), ChunkItem(1, 0, audio, True)])
    assert outputs[0].error is not None
    assert "not open" in outputs[0].error
    assert outputs[1].error is None
    assert outputs[1].final


@pytest.mark.skipif(
    "CUDAExecutionProvider" not in __import__("onnxruntime").get_available_providers(),
    reason="onnxruntime has no CUDA provider here (CPU-only build or no GPU)",
)
def test_cuda_provider_gives_the_cpu_text(exported: Path) -> None:
    cuda = ParaformerOnnxEngine(exported, "fp32", "cuda:0", 1)
    cpu = ParaformerOnnxEngine(exported, "fp32", "cpu", 1)
    audio = speech_like(3, chunks=4, extra=0)
    assert one_stream(cuda, audio, 1) == one_stream(cpu, audio, 2)
