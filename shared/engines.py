"""The engines a worker can run, by name, and what each one's results mean.

Pure data: the engines themselves are in ``workers.engines``, whose registry is the only
place that tells one engine from another by name. Everything else asks an engine's
:class:`EngineCapabilities`, which each worker reports when it is ready.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

# The ONNX engines' graphs: fp32, or int8 (static quantization of the MatMuls).
Precision = Literal["fp32", "int8"]


class EngineName(enum.StrEnum):
    CHECKSUM = "checksum"  # model-free: the samples and CRC-32 of the audio so far
    PARAFORMER = "paraformer"  # FunASR's streaming Paraformer under PyTorch
    PARAFORMER_ONNX = "paraformer-onnx"  # the same model under ONNX Runtime, batched
    PARAFORMER_OPENVINO = "paraformer-openvino"  # the same export under OpenVINO (CPU)
    PARAFORMER_OFFLINE = "paraformer-offline"  # whole utterances, decoded at their end
    PARAFORMER_OFFLINE_ONNX = "paraformer-offline-onnx"  # the same under ONNX Runtime
    FSMN_VAD = "fsmn-vad"  # FunASR's streaming voice activity detection
    FSMN_VAD_ONNX = "fsmn-vad-onnx"  # the same VAD, all streams' frames in one call
    SENSEVOICE = "sensevoice"  # SenseVoiceSmall: whole utterances, tagged, under PyTorch
    SENSEVOICE_ONNX = "sensevoice-onnx"  # the same under ONNX Runtime
    CAMPPLUS = "campplus"  # CAM++ speaker embeddings, clustered into who spoke when


@dataclass(frozen=True, slots=True)
class EngineCapabilities:
    """What an engine's results mean, and what it takes.

    ``text_is_delta``: each result's text is the new text of its piece (the stream's text is
    their concatenation), rather than the running value (the last result's text is all).
    ``decodes_at_final``: a whole-utterance engine; the final piece costs the whole
    utterance's decode, and results before it carry no text. ``timestamps``: final results
    carry each token's time. ``hotwords``: the stream's hotwords change what it decodes.
    ``languages``: it takes the stream's language, has its own ITN (``StreamOptions``), and
    tags its results (``StreamResult.tags``).
    """

    text_is_delta: bool
    decodes_at_final: bool = False
    timestamps: bool = False
    hotwords: bool = False
    languages: bool = False
