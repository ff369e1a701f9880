"""The streaming Paraformer under ONNX Runtime, several streams' chunks in one call.

Each step takes one 600 ms chunk from each waiting stream and runs one encoder call and one
decoder call for all of them. What is per stream stays on the host, per stream: the
frontend (fbank + LFR + CMVN), the positional-encoding offset, the overlap frames, the CIF
integrator and the decoder's FSMN state. The host steps follow funasr's PyTorch
``ParaformerStreaming.inference`` line by line, so that with look-back 0/0 the text is the
PyTorch engine's. Neither torch nor funasr is imported (``onnx_frontend``): a worker holds
the ONNX model and little else.

Look-back: the exported graphs carry no encoder or cross-attention look-back cache (as
FunASR's own C++ runtime, which runs the same exports). A stream's
``encoder_chunk_look_back`` / ``decoder_chunk_look_back`` are accepted and decoded as 0/0;
the worker logs it once.

The graphs come from ``python -m workers.models.export`` (``MODEL_DIR/onnx-gateway/``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from shared.engines import EngineCapabilities, Precision
from shared.messages import Decoded, EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.runtime.onnx_files import INV_TIMESCALES, OnnxFiles, require_export
from workers.engines.runtime.onnx_frontend import (
    FrontendState,
    StreamingFrontend,
    load_sentence_postprocess,
    position_encoding,
)
from workers.engines.runtime.onnx_session import open_session
from workers.engines.table import TableEngine, engine_error

logger = logging.getLogger(__name__)

Floats = npt.NDArray[np.float32]
SAMPLES_PER_UNIT = 960  # chunk_size counts 60 ms units
TAIL_SAMPLES = 960  # a final piece shorter than this decodes the cached overlap frames
INT16_SCALE = np.float32(32768.0)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What the host side needs to know of the model, read from its directory."""

    output_size: int  # encoder output width, also the CIF hidden width
    feats_dim: int  # n_mels x lfr_m
    fsmn_layers: int
    fsmn_dims: int
    fsmn_order: int  # kernel_size - 1 frames of FSMN state per layer
    cif_threshold: float
    cif_tail_threshold: float
    sos: int
    eos: int
    blank_id: int


@dataclass(slots=True)
class _Stream:
    options: StreamOptions
    frontend: FrontendState
    prev_samples: Floats  # audio of a chunk not yet whole
    overlap: Floats  # [look-back + look-ahead frames, feats_dim]
    fsmn: list[Floats]  # per layer [fsmn_dims, fsmn_order]
    cif_hidden: Floats
    cif_alpha: np.float32 = field(default_factory=lambda: np.float32(0.0))
    start_idx: int = 0


@dataclass(slots=True)
class _Job:
    """One chunk of one stream, its encoder input ready."""

    item_index: int
    speech: Floats  # [T, feats_dim], scaled, position-encoded, with the overlap frames
    final: bool  # the stream's last chunk: CIF flushes its tail


@dataclass(slots=True)
class _Pending:
    stream: _Stream
    jobs: list[_Job] = field(default_factory=list)


class ParaformerOnnxEngine(TableEngine[_Stream]):
    name = "paraformer-onnx"
    capabilities = EngineCapabilities(text_is_delta=True)
    # The int8 graphs it reads: ORT's QOperator form, or the QDQ form (OpenVINO's).
    qdq_int8: ClassVar[bool] = False

    def __init__(self, model_dir: Path, precision: Precision, device: str, threads: int) -> None:
        super().__init__()
        self._sentence_postprocess = load_sentence_postprocess()
        self.shape, frontend_conf = _read_model(model_dir)
        self._frontend = StreamingFrontend(model_dir / "am.mvn", frontend_conf)
        self._tokens: list[str] = json.loads((model_dir / "tokens.json").read_text())
        files = OnnxFiles.of(model_dir, precision, self.qdq_int8)
        self._inv_timescales: Floats = np.load(files.directory / INV_TIMESCALES)
        self._encoder = self._open_graph(files.encoder, device, threads)
        self._decoder = self._open_graph(files.decoder, device, threads)
        self._warned_look_back = False

    @classmethod
    def load(cls, spec: EngineSpec) -> ParaformerOnnxEngine:
        if spec.model_dir is None:
            raise ValueError(f"the {cls.name} engine needs a model directory")
        model_dir = Path(spec.model_dir)
        require_export(model_dir, spec.precision, cls.qdq_int8)
        return cls(model_dir, spec.precision, spec.device, spec.threads)

    def _open_graph(self, graph: Path, device: str, threads: int) -> Any:
        """What runs one graph: anything with onnxruntime's ``run(None, feeds)``."""
        return open_session(graph, device, threads)

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        if (options.encoder_chunk_look_back or options.decoder_chunk_look_back) and not (
            self._warned_look_back
        ):
            self._warned_look_back = True
            logger.info("%s decodes with look-back 0/0 (the exports carry none)", self.name)
        shape = self.shape
        overlap_frames = options.chunk_size[0] + options.chunk_size[2]
        stream = _Stream(
            options=options,
            frontend=FrontendState(),
            prev_samples=np.zeros(0, np.float32),
            overlap=np.zeros((overlap_frames, shape.feats_dim), np.float32),
            fsmn=[
                np.zeros((shape.fsmn_dims, shape.fsmn_order), np.float32)
                for _ in range(shape.fsmn_layers)
            ],
            cif_hidden=np.zeros(shape.output_size, np.float32),
        )
        self.streams.open(stream_id, stream)

    # -- a step -------------------------------------------------------------------------

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        step = self.streams.step(items)
        tokens: list[list[str]] = [[] for _ in items]
        pending: dict[int, _Pending] = {}
        for index, item, stream in step.pending():
            entry = pending.setdefault(item.stream_id, _Pending(stream))
            try:
                entry.jobs += self._prepare(stream, index, item)
            except Exception as exc:
                step.fail(item.stream_id, engine_error(exc))
        # One chunk per stream per round, every stream's next chunk in the same call.
        while True:
            round_jobs = [
                (stream_id, entry.stream, entry.jobs.pop(0))
                for stream_id, entry in pending.items()
                if entry.jobs and stream_id in self.streams
            ]
            if not round_jobs:
                break
            try:
                for (_, _, job), words in zip(round_jobs, self._run(round_jobs), strict=True):
                    tokens[job.item_index] += words
            except Exception as exc:  # the whole call failed: so did every stream in it
                for stream_id, _, _ in round_jobs:
                    step.fail(stream_id, engine_error(exc))
        for index, _, _ in step.pending():
            text, _ = self._sentence_postprocess(tokens[index])
            step.answer(index, Decoded(str(text)))
        return step.outputs()

    def _prepare(self, stream: _Stream, index: int, item: ChunkItem) -> list[_Job]:
        """funasr's ``inference``: cut whole chunks, extract features, position-encode and
        overlap them. Host state only; the model calls come later, batched."""
        chunk_size = stream.options.chunk_size
        stride = chunk_size[1] * SAMPLES_PER_UNIT
        scale = np.float32(self.shape.output_size**0.5)
        audio = np.concatenate((stream.prev_samples, item.samples.astype(np.float32) / INT16_SCALE))
        final = item.final
        chunks = len(audio) // stride + int(final)
        remainder = len(audio) % stride * (1 - int(final))
        jobs: list[_Job] = []
        for i in range(chunks):
            last = final and i == chunks - 1
            piece = audio[i * stride : (i + 1) * stride]
            if last and len(piece) < TAIL_SAMPLES:
                # As funasr: the cached overlap frames, scaled again (in place, there), are
                # the encoder's input; the positions still advance.
                speech = stream.overlap * scale
                stream.start_idx += len(speech)
                stream.overlap = speech
            else:
                features = self._frontend(piece, stream.frontend, last) * scale
                encoded = features + position_encoding(
                    stream.start_idx, len(features), self._inv_timescales
                )
                stream.start_idx += len(features)
                speech = np.concatenate((stream.overlap, encoded))
                stream.overlap = speech[len(speech) - (chunk_size[0] + chunk_size[2]) :]
            jobs.append(_Job(index, speech.astype(np.float32), last))
        stream.prev_samples = audio[len(audio) - remainder :] if remainder > 0 else audio[:0]
        return jobs

    def _padded(self, rows: int) -> int:
        """How many rows (or tokens) a call of ``rows`` is made of: as many, for a runtime
        whose cost does not grow with the shapes it has seen."""
        return rows

    def _run(self, round_jobs: list[tuple[int, _Stream, _Job]]) -> list[list[str]]:
        """One encoder call and one decoder call for one chunk of each stream (rows past
        the streams' repeat the first stream's: their outputs are never read)."""
        shape = self.shape
        jobs = [job for _, _, job in round_jobs]
        jobs += [jobs[0]] * (self._padded(len(jobs)) - len(jobs))
        lengths = np.array([job.speech.shape[0] for job in jobs], np.int32)
        speech = np.zeros((len(jobs), int(lengths.max()), shape.feats_dim), np.float32)
        for row, job in enumerate(jobs):
            speech[row, : lengths[row]] = job.speech
        enc, enc_len, alphas = self._encoder.run(
            None, {"speech": speech, "speech_lengths": lengths}
        )
        embeds: list[Floats] = []
        for row, (_, stream, job) in enumerate(round_jobs):
            length = int(enc_len[row])
            embeds.append(self._cif(stream, enc[row, :length], alphas[row, :length], job.final))
        words: list[list[str]] = [[] for _ in round_jobs]
        emitting = [row for row, e in enumerate(embeds) if len(e)]
        if not emitting:
            return words  # funasr skips the decoder, and its state stays as it was
        streams = len(emitting)
        emitting += [emitting[0]] * (self._padded(streams) - streams)
        token_lengths = np.array([len(embeds[row]) for row in emitting], np.int32)
        tokens = self._padded(int(token_lengths.max()))
        acoustic = np.zeros((len(emitting), tokens, shape.output_size), np.float32)
        for slot, row in enumerate(emitting):
            acoustic[slot, : token_lengths[slot]] = embeds[row]
        feeds: dict[str, Floats | npt.NDArray[np.int32]] = {
            "enc": enc[emitting],
            "enc_len": enc_len[emitting].astype(np.int32),
            "acoustic_embeds": acoustic,
            "acoustic_embeds_len": token_lengths,
        }
        for layer in range(shape.fsmn_layers):
            feeds[f"in_cache_{layer}"] = np.stack(
                [round_jobs[row][1].fsmn[layer] for row in emitting]
            )
        logits, _, *caches = self._decoder.run(None, feeds)
        for slot, row in enumerate(emitting[:streams]):
            stream = round_jobs[row][1]
            emitted = int(token_lengths[slot])
            # The whole [cache, new frames] came back: keep the frames that end at this
            # stream's own last token, not at the batch's longest.
            stream.fsmn = [
                np.ascontiguousarray(cache[slot, :, emitted : emitted + shape.fsmn_order])
                for cache in caches
            ]
            ids = logits[slot, :emitted].argmax(axis=-1).tolist()
            words[row] = [
                self._tokens[i] for i in ids if i not in (shape.eos, shape.sos, shape.blank_id)
            ]
        return words

    def _cif(self, stream: _Stream, hidden: Floats, alphas: Floats, final: bool) -> Floats:
        """funasr's ``CifPredictorV2.forward_chunk`` for one stream: the integrate-and-fire
        over this chunk's frames, carrying the remainder to the next chunk."""
        chunk_size = stream.options.chunk_size
        shape = self.shape
        alphas = alphas.copy()
        alphas[: chunk_size[0]] = 0.0
        if not final:
            alphas[sum(chunk_size[:2]) :] = 0.0
        hidden = np.concatenate((stream.cif_hidden[None, :], hidden))
        alphas = np.concatenate((np.array([stream.cif_alpha], np.float32), alphas))
        if final:
            hidden = np.concatenate((hidden, np.zeros((1, shape.output_size), np.float32)))
            alphas = np.concatenate((alphas, np.array([shape.cif_tail_threshold], np.float32)))
        threshold = np.float32(shape.cif_threshold)
        integrate = np.float32(0.0)
        frames = np.zeros(shape.output_size, np.float32)
        fired: list[Floats] = []
        for t in range(len(alphas)):
            alpha = alphas[t]
            if alpha + integrate < threshold:
                integrate += alpha
                frames += alpha * hidden[t]
            else:
                frames += (threshold - integrate) * hidden[t]
                fired.append(frames)
                integrate += alpha
                integrate -= threshold
                frames = integrate * hidden[t]
        stream.cif_alpha = integrate
        stream.cif_hidden = frames / integrate if integrate > 0.0 else frames
        if not fired:
            return np.zeros((0, shape.output_size), np.float32)
        return np.stack(fired).astype(np.float32)


def _read_model(model_dir: Path) -> tuple[ModelShape, dict[str, Any]]:
    import yaml

    config = yaml.safe_load((model_dir / "config.yaml").read_text())
    frontend_conf = dict(config["frontend_conf"])
    frontend_conf["cmvn_file"] = str(model_dir / "am.mvn")
    decoder_conf = config["decoder_conf"]
    predictor_conf = config["predictor_conf"]
    model_conf = config.get("model_conf", {})
    fsmn_layers = decoder_conf["att_layer_num"]
    extra_blocks = decoder_conf["num_blocks"] - decoder_conf["att_layer_num"]
    if extra_blocks > 1:  # funasr's decoders2 carry FSMN state too (only when > 1 of them)
        fsmn_layers += extra_blocks
    shape = ModelShape(
        output_size=config["encoder_conf"]["output_size"],
        feats_dim=frontend_conf["n_mels"] * frontend_conf["lfr_m"],
        fsmn_layers=fsmn_layers,
        fsmn_dims=config["encoder_conf"]["output_size"],
        fsmn_order=decoder_conf["kernel_size"] - 1,
        cif_threshold=float(predictor_conf.get("threshold", 1.0)),
        cif_tail_threshold=float(predictor_conf.get("tail_threshold", 0.45)),
        # funasr's Paraformer defaults; a config may name others.
        sos=int(model_conf.get("sos", 1)),
        eos=int(model_conf.get("eos", 2)),
        blank_id=int(model_conf.get("blank_id", 0)),
    )
    return shape, frontend_conf
