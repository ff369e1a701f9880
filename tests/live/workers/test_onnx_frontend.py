"""The torch-free host side of the ONNX engine against funasr's own torch code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from funasr.frontends.wav_frontend import WavFrontendOnline
from funasr.models.transformer.embedding import StreamSinusoidalPositionEncoder
from funasr.utils.load_utils import extract_fbank
from funasr.utils.postprocess_utils import sentence_postprocess

from workers.engines.runtime.onnx_files import INV_TIMESCALES
from workers.engines.runtime.onnx_frontend import (
    FrontendState,
    StreamingFrontend,
    load_sentence_postprocess,
    position_encoding,
)
from workers.models.export.paraformer import export

pytestmark = pytest.mark.slow


def test_features_equal_funasrs_for_any_cutting(tiny_streaming_model: Path) -> None:
    conf = dict(yaml.safe_load((tiny_streaming_model / "config.yaml").read_text())["frontend_conf"])
    conf["cmvn_file"] = str(tiny_streaming_model / "am.mvn")
    reference = WavFrontendOnline(**conf)
    ours = StreamingFrontend(tiny_streaming_model / "am.mvn", conf)
    frames = 0
    for seed in range(25):
        rng = np.random.default_rng(seed)
        audio = rng.normal(0, 0.1, int(rng.integers(200, 60_000))).astype(np.float32)
        cuts = sorted(rng.integers(0, len(audio), int(rng.integers(0, 6))).tolist())
        bounds = [0, *cuts, len(audio)]
        cache: dict[str, object] = {}
        state = FrontendState()
        for i in range(len(bounds) - 1):
            piece = audio[bounds[i] : bounds[i + 1]]
            final = i == len(bounds) - 2
            expected, _ = extract_fbank(
                [torch.from_numpy(piece)],
                data_type="sound",
                frontend=reference,
                cache=cache,
                is_final=final,
            )
            got = ours(piece, state, final)
            if expected.numel() == 0:
                assert got.shape == (0, ours.output_size)
                continue
            np.testing.assert_array_equal(got, expected.numpy()[0])  # bit for bit
            frames += len(got)
    assert frames > 500


def test_position_encoding_matches_torchs(tiny_streaming_model: Path) -> None:
    export(tiny_streaming_model)
    inv = np.load(tiny_streaming_model / "onnx-gateway" / INV_TIMESCALES)
    encoder = StreamSinusoidalPositionEncoder()
    for start, frames in ((0, 20), (37, 15), (6000, 20), (360_000, 20)):  # up to an hour
        positions = torch.arange(1, start + frames + 1)[None, :]
        expected = encoder.encode(positions, len(inv) * 2, torch.float32)[0, start:]
        np.testing.assert_allclose(
            position_encoding(start, frames, inv), expected.numpy(), rtol=0, atol=2e-6
        )


def test_text_is_funasrs_sentence_postprocess() -> None:
    ours = load_sentence_postprocess()
    for tokens in (["你", "好"], ["hello", "world"], ["he@@", "llo", "你"], ["a", "b", "c"], []):
        assert ours(tokens)[0] == sentence_postprocess(tokens)[0]


def test_an_onnx_worker_imports_neither_torch_nor_funasr(tiny_streaming_model: Path) -> None:
    export(tiny_streaming_model)
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from workers.engines import load_engine\n"
        "from shared.messages import EngineSpec\n"
        f"load_engine(EngineSpec('paraformer-onnx', model_dir={str(tiny_streaming_model)!r}))\n"
        "print('torch' in sys.modules, 'funasr' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.split() == ["False", "False"]
