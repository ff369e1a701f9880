"""Engines: what a worker runs on the audio. Selected by name with :func:`load_engine`."""

from __future__ import annotations

from shared.messages import EngineSpec
from workers.engines.base import Engine

ENGINE_NAMES = ("checksum", "paraformer", "paraformer-onnx", "paraformer-offline", "fsmn-vad")


def load_engine(spec: EngineSpec) -> Engine:
    """Build the engine ``spec`` names; loads its model (slow for real models)."""
    match spec.engine:
        case "checksum":
            from workers.engines.checksum import ChecksumEngine

            return ChecksumEngine()
        case "paraformer":
            from workers.engines.paraformer import ParaformerStreamingEngine

            return ParaformerStreamingEngine.load(spec)
        case "paraformer-onnx":
            from workers.engines.paraformer_onnx import ParaformerOnnxEngine

            return ParaformerOnnxEngine.load(spec)
        case "paraformer-offline":
            from workers.engines.paraformer_offline import ParaformerOfflineEngine

            return ParaformerOfflineEngine.load(spec)
        case "fsmn-vad":
            from workers.engines.fsmn_vad import FsmnVadEngine

            return FsmnVadEngine.load(spec)
        case other:
            raise ValueError(f"unknown engine {other!r}; known: {', '.join(ENGINE_NAMES)}")
