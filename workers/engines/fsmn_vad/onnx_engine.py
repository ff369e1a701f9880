"""FunASR's streaming FSMN-VAD for all of a worker's streams at once, without torch.

The ``fsmn-vad`` engine calls funasr's ``generate`` once per stream and piece. This one
gives the same answers (a piece's ``segments`` are funasr's segment list for it:
``((beg, -1),)``, ``((-1, end),)``, ``((beg, end),)`` or ``()``) from one encoder call per
worker step, for every stream's new frames:

- Per stream, on the host: the 60 ms strides funasr cuts a piece into (the rest waits for
  the next piece; a final piece flushes it), the streaming frontend
  (``onnx_frontend.OnlineFbankFrontend``, bit for bit funasr's ``WavFrontendOnline``), the
  samples aligned with each frame that its energy is read from, the FSMN encoder's
  per-layer memory, and funasr's per-frame decisions (``fsmn_vad_state.StreamingVad``).
- Once per step: the FSMN encoder under ONNX Runtime, over all streams' new frames
  concatenated by stream, each stream's memory in front of its own frames. There is no
  padding, and a stream's scores do not depend on its batch-mates (bit for bit, measured).

The graph is built in memory when the worker loads, from the model's own ``model.pt``
(read without torch, ``torch_checkpoint``): there is no export step. Neither torch nor
funasr is imported. The end-of-sentence silence is the model's ``max_end_silence_time``,
as the ``fsmn-vad`` engine passes it.

The encoder's float32 arithmetic is ONNX Runtime's, not torch's: a frame's scores differ
from funasr's by float32 rounding. A frame's decision follows from its silence score
against a threshold (and its energy, which is computed exactly as funasr does), so the
segments are funasr's unless a frame's score lies within that rounding of the threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shared.engines import EngineCapabilities
from shared.messages import Decoded, EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.fsmn_vad.state import Segment, StreamingVad
from workers.engines.fsmn_vad.window import VadOptions
from workers.engines.runtime.onnx_frontend import OnlineFbankFrontend, OnlineFbankState
from workers.engines.runtime.onnx_session import open_session
from workers.engines.runtime.torch_checkpoint import load_state_dict
from workers.engines.table import TableEngine, engine_error

Floats = npt.NDArray[np.float32]
Indices = npt.NDArray[np.int64]
STRIDE_MS = 60  # funasr's VAD steps through a piece in strides of this; the rest waits
INT16_SCALE = np.float32(32768.0)  # int16 PCM to funasr's float in [-1, 1)
OPSET = 17
_EMPTY = np.zeros(0, np.float32)


# -- the model -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncoderShape:
    """funasr's ``FSMN`` encoder, from ``encoder_conf``."""

    input_dim: int
    layers: int
    proj_dim: int
    lorder: int
    lstride: int
    use_softmax: bool

    @property
    def memory(self) -> int:
        """Frames of each layer's memory: what ``FSMNBlock`` caches."""
        return (self.lorder - 1) * self.lstride

    @classmethod
    def from_conf(cls, conf: dict[str, Any]) -> EncoderShape:
        if int(conf.get("rorder", 0)) > 0:
            # funasr's streaming right context pads each call's frames with zeros: its
            # scores depend on how the audio was cut. fsmn-vad's models have none.
            raise ValueError("the fsmn-vad-onnx engine takes FSMN encoders with rorder 0")
        return cls(
            input_dim=int(conf["input_dim"]),
            layers=int(conf["fsmn_layers"]),
            proj_dim=int(conf["proj_dim"]),
            lorder=int(conf["lorder"]),
            lstride=int(conf.get("lstride", 1)),
            use_softmax=bool(conf.get("use_softmax", True)),
        )


def encoder_graph(
    weights: dict[str, Floats], shape: EncoderShape, sil_pdf_ids: Sequence[int]
) -> bytes:
    """funasr's ``FSMN.forward`` (streaming, with its cache) as an ONNX graph over several
    streams' frames at once, returning only the silence pdfs' scores.

    Inputs: ``feats`` [N, input_dim], all streams' new frames, stream after stream;
    ``memory_<l>`` [S * M, proj_dim], each stream's ``M`` frames of layer ``l``'s memory
    (what ``FSMNBlock`` caches, time-major); ``taps`` [N, lorder] and ``keep`` [S * M]
    (:func:`layout`). Each layer's rows are ``[memory_<l>; its new frames]``: a frame's
    memory term gathers its ``lorder`` taps from there (``FSMNBlock``'s causal depthwise
    ``conv_left``), and the new memory is gathered too. Outputs: ``silence``
    [N, len(sil_pdf_ids)] and ``new_memory_<l>`` [S * M, proj_dim].
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []

    def const(name: str, value: npt.NDArray[Any]) -> str:
        initializers.append(numpy_helper.from_array(value, name))
        return name

    def tensor(name: str) -> Floats:
        key = f"encoder.{name}"
        if f"module.{key}" in weights:
            key = f"module.{key}"  # as funasr's loader, which looks for this prefix first
        return np.ascontiguousarray(weights[key], dtype=np.float32)

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def affine(x: str, name: str, bias: bool = True) -> str:
        inputs = [x, const(f"{name}.weight", tensor(f"{name}.linear.weight"))]
        if bias:
            inputs.append(const(f"{name}.bias", tensor(f"{name}.linear.bias")))
        return node("Gemm", inputs, f"{name}.out", transB=1)

    tap_axis = const("tap_axis", np.array([1], np.int64))
    x = node("Relu", [affine(affine("feats", "in_linear1"), "in_linear2")], "in.relu")
    for layer in range(shape.layers):
        prefix = f"fsmn.{layer}"
        x1 = affine(x, f"{prefix}.linear", bias=False)
        rows = node("Concat", [f"memory_{layer}", x1], f"{prefix}.rows", axis=0)
        node("Gather", [rows, "keep"], f"new_memory_{layer}", axis=0)
        window = node("Gather", [rows, "taps"], f"{prefix}.window", axis=0)  # [N, lorder, P]
        # conv_left's kernel, [proj, 1, lorder, 1], as [lorder, proj]: tap k of channel d.
        taps = tensor(f"{prefix}.fsmn_block.conv_left.weight")[:, 0, :, 0].T
        kernel = const(f"{prefix}.kernel", np.ascontiguousarray(taps))
        weighted = node("Mul", [window, kernel], f"{prefix}.weighted")
        remembered = node("ReduceSum", [weighted, tap_axis], f"{prefix}.remembered", keepdims=0)
        y = node("Add", [x1, remembered], f"{prefix}.sum")
        x = node("Relu", [affine(y, f"{prefix}.affine")], f"{prefix}.relu")
    scores = affine(affine(x, "out_linear1"), "out_linear2")
    if shape.use_softmax:
        scores = node("Softmax", [scores], "softmax", axis=-1)
    ids = const("sil_pdf_ids", np.array(list(sil_pdf_ids), np.int64))
    node("Gather", [scores, ids], "silence", axis=1)

    dim = shape.proj_dim
    memories = [f"memory_{i}" for i in range(shape.layers)]
    inputs = [
        helper.make_tensor_value_info("feats", TensorProto.FLOAT, ["N", shape.input_dim]),
        *(helper.make_tensor_value_info(m, TensorProto.FLOAT, ["SM", dim]) for m in memories),
        helper.make_tensor_value_info("taps", TensorProto.INT64, ["N", shape.lorder]),
        helper.make_tensor_value_info("keep", TensorProto.INT64, ["SM"]),
    ]
    outputs = [
        helper.make_tensor_value_info("silence", TensorProto.FLOAT, ["N", len(sil_pdf_ids)]),
        *(
            helper.make_tensor_value_info(f"new_{m}", TensorProto.FLOAT, ["SM", dim])
            for m in memories
        ),
    ]
    graph = helper.make_graph(nodes, "fsmn_vad_encoder", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8  # what opset 17 needs; newer onnx packages write newer by default
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def layout(lengths: Sequence[int], shape: EncoderShape) -> tuple[Indices, Indices]:
    """The graph's ``taps`` and ``keep`` for streams of ``lengths`` new frames.

    A layer's rows are the ``S`` streams' memories (``M`` rows each), then all new frames.
    Stream ``s`` sees its own ``block``: its memory, then its frames. Its frame ``i`` is
    ``block[i + M]``, and ``FSMNBlock`` adds to it ``conv_left`` over ``block[i + k * lstride]``
    for ``k < lorder``; the stream's new memory is its block's last ``M`` rows.
    """
    memory = shape.memory
    offsets = np.arange(shape.lorder, dtype=np.int64) * shape.lstride
    steps = np.arange(memory, dtype=np.int64)
    streams = len(lengths)
    taps: list[Indices] = []
    keep: list[Indices] = []
    frame = 0
    for s, length in enumerate(lengths):
        own = np.arange(length, dtype=np.int64)
        block = np.concatenate((s * memory + steps, streams * memory + frame + own))
        taps.append(block[own[:, np.newaxis] + offsets[np.newaxis, :]])
        keep.append(block[length + steps])
        frame += length
    return np.concatenate(taps), np.concatenate(keep)


@dataclass(frozen=True, slots=True)
class VadModel:
    """What the engine reads from a model directory."""

    options: VadOptions
    frontend_conf: dict[str, Any]
    encoder: EncoderShape
    graph: bytes

    @classmethod
    def read(cls, model_dir: Path) -> VadModel:
        import yaml

        config = yaml.safe_load((model_dir / "config.yaml").read_text())
        if config.get("frontend", "WavFrontendOnline") != "WavFrontendOnline":
            raise ValueError(f"{model_dir}: the engine runs WavFrontendOnline only")
        options = VadOptions.from_model_conf(config.get("model_conf") or {})
        encoder = EncoderShape.from_conf(config["encoder_conf"])
        weights = load_state_dict(model_dir / "model.pt")
        graph = encoder_graph(weights, encoder, options.sil_pdf_ids)
        return cls(options, dict(config.get("frontend_conf") or {}), encoder, graph)


# -- the frontend's aligned samples ------------------------------------------------------


@dataclass(slots=True)
class AlignedWaveform:
    """The samples behind each frame the frontend emits: funasr's ``WavFrontendOnline``
    with ``return_waveform`` (its ``waveform_buffer``), whose ``aligned_waveforms`` are what
    the VAD reads each frame's energy from."""

    frame_samples: int
    shift_samples: int  # per output (LFR) frame
    buffer: Floats = field(default_factory=lambda: _EMPTY)
    buffer_start: int = 0  # the stream sample that buffer[0] is
    emitted: int = 0  # frames emitted so far

    def push(self, samples: Floats) -> None:
        if len(samples):
            self.buffer = np.concatenate((self.buffer, samples))

    def take(self, frames: int) -> Floats:
        """The samples of the next ``frames`` frames; older samples are let go."""
        start = self.emitted * self.shift_samples
        end = start + (frames - 1) * self.shift_samples + self.frame_samples
        buffer_end = self.buffer_start + len(self.buffer)
        if start < self.buffer_start or end > buffer_end:
            raise RuntimeError(
                "Frontend emitted LFR frames without enough waveform samples: "
                f"need [{start}, {end}), have [{self.buffer_start}, {buffer_end})"
            )
        aligned = self.buffer[start - self.buffer_start : end - self.buffer_start].copy()
        self.emitted += frames
        next_start = min(self.emitted * self.shift_samples, buffer_end)
        self.buffer = self.buffer[next_start - self.buffer_start :]
        self.buffer_start = next_start
        return aligned


# -- the engine ------------------------------------------------------------------------


@dataclass(slots=True)
class _Stream:
    frontend: OnlineFbankState
    waveform: AlignedWaveform
    vad: StreamingVad
    memory: list[Floats]  # per encoder layer [M, proj_dim]
    prev_samples: Floats = field(default_factory=lambda: _EMPTY)  # less than a stride


@dataclass(slots=True)
class _Stride:
    """One stride's frames, their samples, and (once the encoder ran) their scores."""

    item_index: int
    feats: Floats
    waveform: Floats
    final: bool
    silence: Floats = field(default_factory=lambda: np.zeros((0, 1), np.float32))


@dataclass(slots=True)
class _Work:
    """A stream's items in this step, in order, with the strides they were cut into."""

    stream_id: int
    stream: _Stream
    items: list[int] = field(default_factory=list)
    strides: list[_Stride] = field(default_factory=list)
    error: str | None = None  # items from ``failed_item`` on fail with this
    failed_item: int | None = None

    def fail_from(self, item_index: int, exc: Exception) -> None:
        """The stream fails from this item on (or from an earlier one that failed)."""
        if self.failed_item is None or item_index < self.failed_item:
            self.error, self.failed_item = engine_error(exc), item_index


class FsmnVadOnnxEngine(TableEngine[_Stream]):
    name = "fsmn-vad-onnx"
    # As fsmn-vad: each piece's segments are new ones (its text is empty).
    capabilities = EngineCapabilities(text_is_delta=True)

    def __init__(self, model_dir: Path, device: str = "cpu", threads: int = 1) -> None:
        super().__init__()
        self._model = VadModel.read(model_dir)
        self._frontend = OnlineFbankFrontend(model_dir / "am.mvn", self._model.frontend_conf)
        if self._frontend.output_size != self._model.encoder.input_dim:
            raise ValueError(f"{model_dir}: the frontend's features do not fit the encoder")
        self._stride_samples = STRIDE_MS * self._frontend.fs // 1000
        self._encoder = open_session(self._model.graph, device, threads)

    @classmethod
    def load(cls, spec: EngineSpec) -> FsmnVadOnnxEngine:
        if spec.model_dir is None:
            raise ValueError("the fsmn-vad-onnx engine needs a model directory")
        return cls(Path(spec.model_dir), spec.device, spec.threads)

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        encoder = self._model.encoder
        frontend = self._frontend
        self.streams.open(
            stream_id,
            _Stream(
                frontend=OnlineFbankState(),
                waveform=AlignedWaveform(
                    frontend.frame_samples, frontend.shift_samples * frontend.lfr_n
                ),
                vad=StreamingVad(self._model.options),
                memory=[
                    np.zeros((encoder.memory, encoder.proj_dim), np.float32)
                    for _ in range(encoder.layers)
                ],
            ),
        )

    # -- a step -------------------------------------------------------------------------

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        step = self.streams.step(items)
        work: dict[int, _Work] = {}
        for index, item, stream in step.pending():
            entry = work.setdefault(item.stream_id, _Work(item.stream_id, stream))
            entry.items.append(index)
            if entry.error is not None:
                continue
            try:
                entry.strides += self._cut(stream, index, item)
            except Exception as exc:
                entry.fail_from(index, exc)
        scored = [entry for entry in work.values() if entry.strides]
        try:
            self._score(scored)
        except Exception as exc:  # the whole call failed: so did every stream in it
            for entry in scored:
                entry.fail_from(entry.items[0], exc)
        segments: dict[int, list[Segment]] = {}
        for entry in work.values():
            self._decide(entry, segments)
            for index in entry.items:
                if index == entry.failed_item:
                    break
                step.answer(index, Decoded(segments=tuple(segments.get(index, ()))))
            if entry.error is not None:
                step.fail(entry.stream_id, entry.error)
        return step.outputs()

    def _cut(self, stream: _Stream, index: int, item: ChunkItem) -> list[_Stride]:
        """funasr's ``FsmnVADStreaming.inference`` up to the model: whole strides, each
        through the frontend; the remainder waits. An empty piece changes nothing (funasr
        returns before touching the cache, final or not)."""
        if not len(item.samples):
            return []
        audio = np.concatenate((stream.prev_samples, item.samples.astype(np.float32) / INT16_SCALE))
        stride = self._stride_samples
        final = item.final
        count = len(audio) // stride + int(final)
        remainder = len(audio) % stride * (1 - int(final))
        strides: list[_Stride] = []
        for i in range(count):
            last = final and i == count - 1
            piece = audio[i * stride : (i + 1) * stride]
            stream.waveform.push(piece)
            feats = self._frontend(piece, stream.frontend, last)
            if len(feats):
                strides.append(_Stride(index, feats, stream.waveform.take(len(feats)), last))
        stream.prev_samples = audio[len(audio) - remainder :] if remainder > 0 else _EMPTY
        return strides

    def _score(self, entries: list[_Work]) -> None:
        """One encoder call for every stride of every stream; each stream's memory moves
        on by its own frames."""
        if not entries:
            return
        encoder = self._model.encoder
        lengths = [sum(len(s.feats) for s in entry.strides) for entry in entries]
        taps, keep = layout(lengths, encoder)
        feeds: dict[str, npt.NDArray[Any]] = {
            "feats": np.concatenate([s.feats for entry in entries for s in entry.strides]),
            "taps": taps,
            "keep": keep,
        }
        for layer in range(encoder.layers):
            feeds[f"memory_{layer}"] = np.concatenate(
                [entry.stream.memory[layer] for entry in entries]
            )
        silence, *memories = self._encoder.run(None, feeds)
        frame = 0
        for s, entry in enumerate(entries):
            rows = slice(s * encoder.memory, (s + 1) * encoder.memory)
            entry.stream.memory = [memory[rows].copy() for memory in memories]
            for stride in entry.strides:
                stride.silence = silence[frame : frame + len(stride.feats)]
                frame += len(stride.feats)

    def _decide(self, entry: _Work, segments: dict[int, list[Segment]]) -> None:
        """funasr's decisions over each stride's frames, in order, until one fails."""
        for stride in entry.strides:
            if entry.failed_item is not None and stride.item_index >= entry.failed_item:
                return
            try:
                found = entry.stream.vad.accept(stride.waveform, stride.silence, stride.final)
            except Exception as exc:
                entry.fail_from(stride.item_index, exc)
                return
            segments.setdefault(stride.item_index, []).extend(found)
