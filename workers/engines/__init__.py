"""Engines: what a worker runs on the audio. The registry: an engine by its name.

This is the one place that tells engines apart by name (``shared.engines.EngineName``);
everything else reads what an engine does from its ``capabilities``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from shared.engines import EngineName
from shared.messages import EngineSpec
from workers.engines.base import Engine

# Builds the engine a worker runs, in the worker process: :func:`load_engine`, unless the pool
# is given another (a module-level function: it is pickled by name into spawned workers).
EngineLoader = Callable[[EngineSpec], Engine]


def load_engine(spec: EngineSpec) -> Engine:
    """Build the engine ``spec`` names; loads its model (slow for real models)."""
    match spec.engine:
        case EngineName.CHECKSUM:
            from workers.engines.checksum import ChecksumEngine

            return ChecksumEngine.load(spec)
        case EngineName.PARAFORMER:
            from workers.engines.paraformer import ParaformerStreamingEngine

            return ParaformerStreamingEngine.load(spec)
        case EngineName.PARAFORMER_ONNX:
            from workers.engines.paraformer_onnx import ParaformerOnnxEngine

            return ParaformerOnnxEngine.load(spec)
        case EngineName.PARAFORMER_OPENVINO:
            from workers.engines.paraformer_openvino import ParaformerOpenVinoEngine

            return ParaformerOpenVinoEngine.load(spec)
        case EngineName.PARAFORMER_OFFLINE:
            from workers.engines.paraformer_offline import ParaformerOfflineEngine

            return ParaformerOfflineEngine.load(spec)
        case EngineName.PARAFORMER_OFFLINE_ONNX:
            from workers.engines.paraformer_offline_onnx import ParaformerOfflineOnnxEngine

            return ParaformerOfflineOnnxEngine.load(spec)
        case EngineName.FSMN_VAD:
            from workers.engines.fsmn_vad import FsmnVadEngine

            return FsmnVadEngine.load(spec)
        case EngineName.FSMN_VAD_ONNX:
            from workers.engines.fsmn_vad_onnx import FsmnVadOnnxEngine

            return FsmnVadOnnxEngine.load(spec)
        case EngineName.SENSEVOICE:
            from workers.engines.sensevoice import SenseVoiceEngine

            return SenseVoiceEngine.load(spec)
        case EngineName.SENSEVOICE_ONNX:
            from workers.engines.sensevoice_onnx import SenseVoiceOnnxEngine

            return SenseVoiceOnnxEngine.load(spec)
        case EngineName.CAMPPLUS:
            from workers.engines.campplus import CamppEngine

            return CamppEngine.load(spec)
    known = ", ".join(EngineName)
    raise ValueError(f"unknown engine {spec.engine!r}; known: {known}")


def select_engine(
    model_engine: EngineName, runtime: str, model_dir: str | None = None
) -> EngineName:
    """The engine that serves a model: the one its kind calls for, except that ``runtime``
    (``ASR_ENGINE``) picks how a Paraformer runs, under PyTorch or ONNX Runtime.

    ``paraformer-onnx`` puts a streaming Paraformer on ``paraformer-onnx`` and an offline one
    on ``paraformer-offline-onnx``, unless its class is one the offline export does not carry
    (SeACo's hotwords, BiCifParaformer's timestamps), which ``model_dir`` tells: such a
    model, or one whose directory is not given, stays on ``paraformer-offline``. It puts
    an FSMN-VAD on ``fsmn-vad-onnx``, torch-free as well, and SenseVoiceSmall on
    ``sensevoice-onnx``. ``paraformer-openvino`` puts a streaming Paraformer on OpenVINO,
    and every other model where ``paraformer-onnx`` does.
    """
    if runtime not in (EngineName.PARAFORMER_ONNX, EngineName.PARAFORMER_OPENVINO):
        return model_engine
    if model_engine is EngineName.PARAFORMER:
        return EngineName(runtime)
    if model_engine is EngineName.SENSEVOICE:
        return EngineName.SENSEVOICE_ONNX  # funasr's own export, no torch in the worker
    if model_engine is EngineName.FSMN_VAD:
        return EngineName.FSMN_VAD_ONNX  # torch-free too: no export, all streams in one call
    if model_engine is EngineName.PARAFORMER_OFFLINE and model_dir is not None:
        from workers.engines.paraformer_offline_onnx import serves

        if serves(Path(model_dir)):
            return EngineName.PARAFORMER_OFFLINE_ONNX
    return model_engine


def needs_onnx_export(engine: EngineName) -> bool:
    """Whether the engine loads an ONNX export of the model (``workers.models.export``)."""
    return engine in (
        EngineName.PARAFORMER_ONNX,
        EngineName.PARAFORMER_OPENVINO,
        EngineName.PARAFORMER_OFFLINE_ONNX,
        EngineName.SENSEVOICE_ONNX,
    )
