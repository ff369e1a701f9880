"""The engines a worker can run, by name, and what each one's results mean.

Pure data: the engines themselves are in ``workers.engines``, whose table
(``workers.engines.kinds``) is the only place that tells one engine or model kind from
another. Everything else asks an engine's :class:`EngineCapabilities`, which each worker
reports when it is ready.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

# The ONNX engines' graphs: fp32, or int8 (static quantization of the MatMuls).
Precision = Literal["fp32", "int8"]


# An engine's name: ours are the rows of ``workers.engines.kinds.ENGINES`` ("paraformer-onnx",
# "fsmn-vad", ...); a user's engine is named by its class's import path ("pkg.mod:Engine").
EngineName = str


class Role(enum.StrEnum):
    """What a model does in a served model: the streaming decode, and its companions (the
    whole-utterance decode, the VAD, the punctuation, the speakers)."""

    STREAMING = "streaming"
    OFFLINE = "offline"
    VAD = "vad"
    PUNCTUATION = "punc"
    SPEAKER = "speaker"


# How an engine runs its model: funasr's PyTorch code, ONNX Runtime (batched, on an export
# made at start-up), or OpenVINO (the streaming Paraformer's export; the other kinds as
# ONNX Runtime runs them). A kind without an engine for a runtime runs under the next one
# in its line (``RUNTIME_FALLBACKS``).
Runtime = Literal["torch", "onnx", "openvino"]
RUNTIMES: tuple[Runtime, ...] = ("torch", "onnx", "openvino")
# What ASR_ENGINE said before ASR_RUNTIME named the runtime for what it is.
RUNTIME_ALIASES: dict[str, Runtime] = {
    "paraformer": "torch",
    "paraformer-onnx": "onnx",
    "paraformer-openvino": "openvino",
}
RUNTIME_FALLBACKS: dict[Runtime, tuple[Runtime, ...]] = {
    "torch": ("torch",),
    "onnx": ("onnx", "torch"),
    "openvino": ("openvino", "onnx", "torch"),
}


@dataclass(frozen=True, slots=True)
class EngineCapabilities:
    """What an engine's results mean, and what it takes.

    ``text_is_delta``: each result's text is the new text of its piece (the stream's text is
    their concatenation), rather than the running value (the last result's text is all).
    ``decodes_at_final``: a whole-utterance engine; the final piece costs the whole
    utterance's decode, and results before it carry no text. ``timestamps``: final results
    carry each token's time. ``hotwords``: the stream's hotwords change what it decodes.
    ``languages``: it takes the stream's language, has its own ITN (``StreamOptions``), and
    tags its results (``StreamResult.tags``). ``regions``: a stream is one speech region,
    decoded again as it grows (streaming SenseVoice): the gateway opens one per region it
    finds, in every mode, so that no stream's decode outgrows a region. ``session_places``:
    the gateway-wide session places (ASR_MAX_SESSIONS) a session of this engine takes, its
    bounded cost in streams of a streaming Paraformer's (admission counts it before it
    admits).
    """

    text_is_delta: bool
    decodes_at_final: bool = False
    timestamps: bool = False
    hotwords: bool = False
    languages: bool = False
    regions: bool = False
    session_places: int = 1
