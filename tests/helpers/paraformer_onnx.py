"""Audio and one-stream decoding for the tests of the streaming Paraformer's engines (PyTorch,
ONNX Runtime, OpenVINO): speech-like tones cut into 600 ms chunks, fed one stream alone."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from shared.messages import StreamOptions
from workers.engines.base import ChunkItem
from workers.engines.paraformer.streaming import ParaformerStreamingEngine
from workers.engines.paraformer.streaming_onnx import ParaformerOnnxEngine

CHUNK = 9600  # 600 ms
NO_LOOK_BACK = StreamOptions(
    chunk_size=(5, 10, 5), encoder_chunk_look_back=0, decoder_chunk_look_back=0
)


NO_OPENVINO = pytest.mark.skipif(
    importlib.util.find_spec("openvino") is None, reason="openvino is not installed"
)


def speech_like(seed: int, chunks: int, extra: int) -> np.ndarray:
    """A tone with noise: random weights emit tokens for it at a rate that varies."""
    rng = np.random.default_rng(seed)
    n = chunks * CHUNK + extra
    t = np.arange(n) / 16000
    tone = 3000 * (1 + seed % 3) * np.sin(2 * np.pi * (150 + 40 * seed) * t)
    return (tone + 1500 * rng.standard_normal(n)).astype(np.int16)


def pieces(audio: np.ndarray) -> list[np.ndarray]:
    return [audio[i : i + CHUNK] for i in range(0, len(audio), CHUNK)]


def one_stream(
    engine: ParaformerOnnxEngine | ParaformerStreamingEngine,
    audio: np.ndarray,
    stream_id: int,
    options: StreamOptions = NO_LOOK_BACK,
) -> list[str]:
    engine.open_stream(stream_id, options)
    cut = pieces(audio)
    return [
        engine.feed([ChunkItem(stream_id, k, piece, k == len(cut) - 1)])[0].text
        for k, piece in enumerate(cut)
    ]
