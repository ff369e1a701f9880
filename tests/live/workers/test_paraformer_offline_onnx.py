"""The offline Paraformer under ONNX Runtime on the tiny synthetic model: its export, its
features and text against funasr's PyTorch ``generate``, batched against alone, int8, and
the engine through a real worker pool."""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
import torch
import yaml
from funasr.frontends.wav_frontend import WavFrontend
from funasr.utils.load_utils import extract_fbank

from shared.engines import Role, Runtime
from shared.messages import EngineSpec, StreamOptions
from shared.settings import PoolSettings
from tests.helpers.timing import within
from workers.engines import load_engine, needs_onnx_export, select_engine
from workers.engines.base import ChunkItem
from workers.engines.paraformer.offline_onnx import ParaformerOfflineOnnxEngine
from workers.engines.paraformer.streaming import load_automodel, to_float
from workers.engines.runtime.onnx_files import OfflineOnnxFiles, up_to_date
from workers.engines.runtime.onnx_frontend import UtteranceFrontend
from workers.models.export.offline import export_offline
from workers.models.resolve import resolve_model
from workers.pool import WorkerPool

pytestmark = pytest.mark.slow

# Different lengths, two of them within 1.25x of each other (one call), the rest apart.
SECONDS = (0.6, 1.0, 1.1, 1.7, 2.4, 3.3)


def speech_like(seed: int, seconds: float) -> np.ndarray:
    """A tone with noise: the random-weight predictor fires about 3 tokens a second on it."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    tone = 3000 * (1 + seed % 3) * np.sin(2 * np.pi * (150 + 40 * seed) * t)
    return (tone + 1500 * rng.standard_normal(t.size)).astype(np.int16)


def decode(
    engine: ParaformerOfflineOnnxEngine, clips: list[np.ndarray], first_id: int
) -> list[str]:
    """The clips' texts, all their final pieces in one engine step; no piece fails."""
    for s in range(len(clips)):
        engine.open_stream(first_id + s, StreamOptions())
    outputs = engine.feed([ChunkItem(first_id + s, 0, c, True) for s, c in enumerate(clips)])
    assert [o.stream_id for o in outputs] == [first_id + s for s in range(len(clips))]
    assert all(o.error is None and o.final for o in outputs), [o.error for o in outputs]
    return [o.text for o in outputs]


class _Calls:
    """Wraps the engine's onnxruntime session: records each call's batch size."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.batches: list[int] = []

    def run(self, names: Any, feeds: dict[str, Any]) -> Any:
        self.batches.append(len(feeds["speech_lengths"]))
        return self.session.run(names, feeds)


@pytest.fixture(scope="module")
def exported(tiny_offline_model: Path) -> Path:
    export_offline(tiny_offline_model, int8=True, threads=1)
    return tiny_offline_model


@pytest.fixture(scope="module")
def fp32(exported: Path) -> ParaformerOfflineOnnxEngine:
    return ParaformerOfflineOnnxEngine(exported, "fp32", "cpu", 1)


@pytest.fixture(scope="module")
def automodel(exported: Path) -> Any:
    return load_automodel(str(exported), "cpu", 1)


def generate(automodel: Any, clip: np.ndarray) -> str:
    """funasr's text for one utterance alone: the reference."""
    return str(automodel.generate(input=to_float(clip), disable_pbar=True)[0]["text"])


@pytest.fixture(scope="module")
def pytorch_texts(automodel: Any) -> list[str]:
    return [generate(automodel, speech_like(s, seconds)) for s, seconds in enumerate(SECONDS)]


# -- export ------------------------------------------------------------------------------


def test_export_writes_both_precisions_once(exported: Path) -> None:
    for precision in ("fp32", "int8"):
        assert OfflineOnnxFiles.of(exported, precision).model.stat().st_size > 0
        assert up_to_date(exported, precision)
    model = OfflineOnnxFiles.of(exported, "fp32").model
    before = model.stat().st_mtime_ns
    started = time.monotonic()
    # The export command (what the pool's workers.models.ready runs in-process) finds the
    # offline directory's export, and only checks it.
    subprocess.run(
        [sys.executable, "-m", "workers.models.export", str(exported), "--int8"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    export_offline(exported, int8=True)
    assert time.monotonic() - started < 30
    assert model.stat().st_mtime_ns == before


def test_a_changed_model_is_exported_again(tmp_path: Path, exported: Path) -> None:
    copy = tmp_path / "model"
    copy.mkdir()
    for name in ("config.yaml", "am.mvn", "model.pt", "tokens.json"):
        (copy / name).write_bytes((exported / name).read_bytes())
    export_offline(copy)
    assert up_to_date(copy, "fp32")
    assert not up_to_date(copy, "int8")  # not asked for
    later = time.time() + 10
    os.utime(copy / "model.pt", (later, later))  # new weights
    assert not up_to_date(copy, "fp32")


def test_models_the_export_does_not_carry_stay_on_pytorch(
    exported: Path, tiny_timestamp_model: Path, tiny_seaco_model: Path, tiny_streaming_model: Path
) -> None:
    def engine(model: Path, runtime: Runtime, role: Role = Role.OFFLINE) -> str:
        return select_engine(resolve_model(str(model), "/nonexistent", role).kind, runtime)

    assert engine(exported, "onnx") == "paraformer-offline-onnx"
    assert engine(exported, "torch") == "paraformer-offline"
    assert engine(tiny_streaming_model, "onnx", Role.STREAMING) == "paraformer-onnx"
    assert needs_onnx_export("paraformer-offline-onnx")
    assert not needs_onnx_export("paraformer-offline")
    for kept in (tiny_timestamp_model, tiny_seaco_model):  # timestamps; hotwords
        assert engine(kept, "onnx") == "paraformer-offline"
        result = subprocess.run(
            [sys.executable, "-m", "workers.models.export", str(kept)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2
        assert "paraformer-offline" in result.stderr


def test_the_engine_refuses_a_missing_export(tmp_path: Path) -> None:
    spec = EngineSpec("paraformer-offline-onnx", model_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"python -m workers\.models\.export"):
        ParaformerOfflineOnnxEngine.load(spec)


def test_an_offline_onnx_worker_imports_neither_torch_nor_funasr(exported: Path) -> None:
    code = (
        "import sys\n"
        "from workers.engines import load_engine\n"
        "from shared.messages import EngineSpec\n"
        f"load_engine(EngineSpec('paraformer-offline-onnx', model_dir={str(exported)!r}))\n"
        "print('torch' in sys.modules, 'funasr' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.split() == ["False", "False"]


# -- fidelity ----------------------------------------------------------------------------


def test_features_equal_funasrs_wav_frontend(tiny_offline_model: Path) -> None:
    conf = dict(yaml.safe_load((tiny_offline_model / "config.yaml").read_text())["frontend_conf"])
    reference = WavFrontend(cmvn_file=str(tiny_offline_model / "am.mvn"), **conf)
    ours = UtteranceFrontend(tiny_offline_model / "am.mvn", conf)
    frames = 0
    # Below 25 ms funasr makes one frame of the clip's own length (down to ~16 ms, where
    # its 80 mel bins no longer fit and it fails).
    for n in (260, 399, 400, 401, 559, 1000, 16_000, 33_333, 60_001):
        audio = np.random.default_rng(n).normal(0, 0.1, n).astype(np.float32)
        expected, _ = extract_fbank(
            [torch.from_numpy(audio)], data_type="sound", frontend=reference
        )
        got = ours(audio)
        np.testing.assert_array_equal(got, expected.numpy()[0])  # bit for bit
        frames += len(got)
    assert frames > 100


def test_fp32_equals_pytorch_alone_and_batched(
    fp32: ParaformerOfflineOnnxEngine, pytorch_texts: list[str]
) -> None:
    clips = [speech_like(s, seconds) for s, seconds in enumerate(SECONDS)]
    alone = [decode(fp32, [c], 100 + s)[0] for s, c in enumerate(clips)]
    assert alone == pytorch_texts
    assert sum(len(t) for t in alone) > 20  # real text, not empty strings compared
    calls = _Calls(fp32._session)
    fp32._session = calls
    try:
        batched = decode(fp32, clips, 200)
    finally:
        fp32._session = calls.session
    assert batched == pytorch_texts
    # Grouped as paraformer-offline groups: 1.0 s and 1.1 s share a call, the rest apart.
    assert sorted(calls.batches) == [1, 1, 1, 1, 2]
    assert fp32.active_streams == 0


def test_padding_does_not_reach_a_shorter_row(
    fp32: ParaformerOfflineOnnxEngine, automodel: Any
) -> None:
    """Eight clips of 0.5 to 3.1 s padded into one call (by hand: a group pads by 25% at
    most): each row's text is funasr's for the clip alone. funasr's own batch of them is
    not (its predictor reads the padding), which shows these clips feel the padding."""
    clips = []
    for s in range(8):
        rng = np.random.default_rng(s)
        t = np.arange(int((0.5 + 0.37 * s) * 16000)) / 16000
        tone = 3000 * np.sin(2 * np.pi * (200 + 60 * s) * t)
        clips.append((tone + 1500 * rng.standard_normal(t.size)).astype(np.int16))
    alone = [generate(automodel, c) for c in clips]
    funasr_batched = automodel.generate(
        input=[to_float(c) for c in clips], batch_size=len(clips), disable_pbar=True
    )
    assert [r["text"] for r in funasr_batched] != alone
    results = fp32._recognise([_final(i, c) for i, c in enumerate(clips)])
    assert [text for text, _ in results] == alone


def test_partials_carry_no_text_and_empty_or_tiny_clips_give_none(
    fp32: ParaformerOfflineOnnxEngine, pytorch_texts: list[str]
) -> None:
    audio = speech_like(4, SECONDS[4])
    fp32.open_stream(1, StreamOptions())
    (partial,) = fp32.feed([ChunkItem(1, 0, audio[:7000], False)])
    assert partial.text == ""
    assert not partial.final
    (final,) = fp32.feed([ChunkItem(1, 1, audio[7000:], True)])
    assert final.text == pytorch_texts[4]
    assert fp32.capabilities.decodes_at_final
    assert fp32.capabilities.text_is_delta
    # No row of this call has a token (0.05 s: one frame's weight and the tail's < 1).
    tiny = [np.full(800 + 50 * i, 300 * (i + 1), np.int16) for i in range(3)]
    assert decode(fp32, tiny, 300) == ["", "", ""]
    assert decode(fp32, [np.zeros(0, np.int16)], 400) == [""]


def test_int8_is_batch_invariant_and_near_fp32(
    exported: Path, fp32: ParaformerOfflineOnnxEngine
) -> None:
    int8 = ParaformerOfflineOnnxEngine(exported, "int8", "cpu", 1)
    clips = [speech_like(50 + s, seconds) for s, seconds in enumerate(SECONDS)]
    alone = [decode(int8, [c], 500 + s)[0] for s, c in enumerate(clips)]
    assert decode(int8, clips, 600) == alone
    # Padded far beyond a group's 25%, by hand: fixed scales, so still the same.
    assert [text for text, _ in int8._recognise([_final(i, c) for i, c in enumerate(clips)])] == (
        alone
    )
    reference = "".join(decode(fp32, clips, 700))
    hypothesis = "".join(alone)
    similarity = difflib.SequenceMatcher(None, reference, hypothesis).ratio()
    print(f"int8 against fp32: {similarity:.2f} similar over {len(reference)} characters")
    assert len(hypothesis) > 0
    assert similarity > 0.5


@pytest.mark.anyio
async def test_an_offline_onnx_pool_gathers_utterances_ending_together(
    exported: Path, pytorch_texts: list[str]
) -> None:
    settings = PoolSettings(
        model=str(exported),
        kind=Role.OFFLINE,
        runtime="onnx",
        devices=("cpu",),
        batch_wait_s=0.3,
        chunk_deadline_s=10.0,
    )
    clips = [speech_like(s, seconds) for s, seconds in enumerate(SECONDS)]
    async with WorkerPool(settings) as pool:
        assert pool.engine == "paraformer-offline-onnx"
        texts: list[str] = [""] * len(clips)

        async def one(index: int) -> None:
            texts[index] = await pool.transcribe(clips[index])

        with within(60):
            async with anyio.create_task_group() as group:
                for index in range(len(clips)):
                    group.start_soon(one, index)
    assert texts == pytorch_texts


@pytest.mark.skipif(
    "CUDAExecutionProvider" not in __import__("onnxruntime").get_available_providers(),
    reason="onnxruntime has no CUDA provider here (CPU-only build or no GPU)",
)
def test_cuda_provider_gives_the_cpu_text(exported: Path, pytorch_texts: list[str]) -> None:
    cuda = load_engine(
        EngineSpec("paraformer-offline-onnx", device="cuda:0", model_dir=str(exported))
    )
    assert isinstance(cuda, ParaformerOfflineOnnxEngine)
    clips = [speech_like(s, seconds) for s, seconds in enumerate(SECONDS)]
    assert decode(cuda, clips, 800) == pytorch_texts


def _final(index: int, audio: np.ndarray) -> Any:
    from workers.engines.whole_utterance import Final

    return Final(index, ChunkItem(index, 0, audio, True), audio, StreamOptions())
