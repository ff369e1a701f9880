"""The streaming Paraformer's host side without torch: frontend, positions, text.

A worker of the ``paraformer-onnx`` engine must not import torch or funasr (importing them
costs ~470 MB of resident memory per worker, more than an int8 model). These are numpy
ports of the funasr pieces the engine needs, each kept step for step with its original so
that the features, and so the text, are the same (tests compare them with funasr's own):

- ``StreamingFrontend``: ``funasr.frontends.wav_frontend.WavFrontendOnline`` (fbank through
  kaldi-native-fbank, as funasr does without torchaudio; LFR; CMVN), per-stream state in a
  ``FrontendState``.
- ``UtteranceFrontend``: ``funasr.frontends.wav_frontend.WavFrontend``, a whole utterance at
  once (the offline Paraformer's, ``paraformer-offline-onnx``); ``pad_rows`` batches its
  utterances' features for one graph call.
- ``position_encoding``: ``StreamSinusoidalPositionEncoder.encode``.
- ``load_sentence_postprocess``: funasr's own function, loaded without the package.

funasr is MIT-licensed; these follow its 1.4 sources.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float32]

_EMPTY_WAVE = np.zeros(0, np.float32)


def load_cmvn(path: Path) -> Floats:
    """``am.mvn`` (Kaldi nnet text): the ``<AddShift>`` and ``<Rescale>`` rows, [2, dim]."""
    lines = path.read_text(encoding="utf-8").splitlines()
    means: list[str] = []
    scales: list[str] = []
    for i, line in enumerate(lines):
        item = line.split()
        if not item or i + 1 >= len(lines):
            continue
        following = lines[i + 1].split()
        if item[0] == "<AddShift>" and following and following[0] == "<LearnRateCoef>":
            means = following[3:-1]
        elif item[0] == "<Rescale>" and following and following[0] == "<LearnRateCoef>":
            scales = following[3:-1]
    return np.array([means, scales], dtype=np.float32)


@dataclass(slots=True)
class FrontendState:
    """One stream's frontend buffers (funasr's ``cache["frontend"]``)."""

    input_cache: Floats = field(default_factory=lambda: _EMPTY_WAVE)
    reserve_waveforms: Floats = field(default_factory=lambda: _EMPTY_WAVE)
    lfr_splice_cache: Floats | None = None  # fbank frames waiting for their LFR window


class StreamingFrontend:
    """fbank -> LFR -> CMVN, chunk by chunk, as ``WavFrontendOnline`` with batch size 1."""

    def __init__(self, cmvn_file: Path, conf: dict[str, Any]) -> None:
        import kaldi_native_fbank as knf

        self._knf = knf
        self.fs = int(conf.get("fs", 16000))
        self.n_mels = int(conf.get("n_mels", 80))
        self.frame_length = float(conf.get("frame_length", 25))
        self.frame_shift = float(conf.get("frame_shift", 10))
        self.lfr_m = int(conf.get("lfr_m", 1))
        self.lfr_n = int(conf.get("lfr_n", 1))
        self.window = str(conf.get("window", "hamming"))
        self.dither = float(conf.get("dither", 1.0))
        self.frame_samples = int(self.frame_length * self.fs / 1000)
        self.shift_samples = int(self.frame_shift * self.fs / 1000)
        self.cmvn = load_cmvn(cmvn_file)

    @property
    def output_size(self) -> int:
        return self.n_mels * self.lfr_m

    def __call__(self, samples: Floats, state: FrontendState, is_final: bool) -> Floats:
        """Features [frames, n_mels x lfr_m] for ``samples`` (float in [-1, 1))."""
        waveforms, feats = self._fbank(samples, state)
        empty = np.zeros((0, self.output_size), np.float32)
        if len(feats):
            waves = np.concatenate((state.reserve_waveforms, waveforms))
            if state.lfr_splice_cache is None:
                state.lfr_splice_cache = np.repeat(feats[:1], (self.lfr_m - 1) // 2, axis=0)
            splice = state.lfr_splice_cache
            if is_final or len(feats) + len(splice) >= self.lfr_m:
                feats = np.concatenate((splice, feats))
                frame_from_waveforms = int(
                    (len(waves) - self.frame_samples) / self.shift_samples + 1
                )
                minus_frame = (self.lfr_m - 1) // 2 if len(state.reserve_waveforms) == 0 else 0
                out, splice_idx = self._lfr_cmvn(feats, state, is_final)
                if self.lfr_m == 1:
                    state.reserve_waveforms = _EMPTY_WAVE
                else:
                    reserve_frame_idx = splice_idx - minus_frame
                    state.reserve_waveforms = waves[
                        reserve_frame_idx * self.shift_samples : frame_from_waveforms
                        * self.shift_samples
                    ]
                return out
            state.reserve_waveforms = waves[: -(self.frame_samples - self.shift_samples)]
            state.lfr_splice_cache = np.concatenate((splice, feats))
            return empty
        if is_final and state.lfr_splice_cache is not None:
            out, _ = self._lfr_cmvn(state.lfr_splice_cache, state, is_final)
            return out
        return empty

    def _fbank(self, samples: Floats, state: FrontendState) -> tuple[Floats, Floats]:
        """``forward_fbank``: whole frames from the buffered and new samples."""
        data = np.concatenate((state.input_cache, samples.astype(np.float32)))
        frames = _frame_count(len(data), self.frame_samples, self.shift_samples)
        keep = len(data) - frames * self.shift_samples
        state.input_cache = data[-keep:] if keep else data[len(data) :]
        if not frames:
            return _EMPTY_WAVE, np.zeros((0, self.n_mels), np.float32)
        used = data[: (frames - 1) * self.shift_samples + self.frame_samples]
        return used, self._kaldi_fbank(data * np.float32(1 << 15))

    def _kaldi_fbank(self, waveform: Floats, frame_length: float | None = None) -> Floats:
        fbank = self._knf.OnlineFbank(self._fbank_options(frame_length))
        fbank.accept_waveform(float(self.fs), waveform.astype(np.float32).tolist())
        fbank.input_finished()
        count = fbank.num_frames_ready
        if count == 0:
            return np.zeros((0, self.n_mels), np.float32)
        return np.stack([fbank.get_frame(i) for i in range(count)]).astype(np.float32)

    def _fbank_options(self, frame_length: float | None = None) -> Any:
        """funasr's ``kaldi.fbank`` options, for kaldi-native-fbank."""
        opts = self._knf.FbankOptions()
        opts.frame_opts.samp_freq = float(self.fs)
        opts.frame_opts.frame_length_ms = (
            self.frame_length if frame_length is None else frame_length
        )
        opts.frame_opts.frame_shift_ms = self.frame_shift
        opts.frame_opts.dither = self.dither
        opts.frame_opts.snip_edges = True
        opts.frame_opts.window_type = self.window
        opts.frame_opts.preemph_coeff = 0.97
        opts.frame_opts.remove_dc_offset = True
        opts.frame_opts.round_to_power_of_two = True
        opts.mel_opts.num_bins = self.n_mels
        opts.mel_opts.low_freq = 20.0
        opts.mel_opts.high_freq = 0.0
        opts.energy_floor = 0.0
        opts.raw_energy = True
        opts.use_energy = False
        opts.use_log_fbank = True
        opts.use_power = True
        opts.htk_compat = False
        return opts

    def _lfr_cmvn(self, feats: Floats, state: FrontendState, is_final: bool) -> tuple[Floats, int]:
        out = feats
        splice_idx = 0
        if self.lfr_m != 1 or self.lfr_n != 1:
            out, state.lfr_splice_cache, splice_idx = _apply_lfr(
                feats, self.lfr_m, self.lfr_n, is_final
            )
        dim = out.shape[1]
        out = (out + self.cmvn[0:1, :dim]) * self.cmvn[1:2, :dim]
        return out.astype(np.float32), splice_idx


class UtteranceFrontend:
    """fbank -> LFR -> CMVN over a whole utterance at once: funasr's offline ``WavFrontend``
    on one waveform (what ``Paraformer.inference`` extracts), with the streaming frontend's
    fbank options and CMVN."""

    def __init__(self, cmvn_file: Path, conf: dict[str, Any]) -> None:
        self._frontend = StreamingFrontend(cmvn_file, conf)

    @property
    def output_size(self) -> int:
        return self._frontend.output_size

    def __call__(self, samples: Floats) -> Floats:
        """Features [frames, n_mels x lfr_m] of ``samples`` (float in [-1, 1))."""
        f = self._frontend
        # As WavFrontend: a clip shorter than a frame is one frame of its own length (in
        # float32, as funasr's tensor division).
        frame_length = min(
            f.frame_length, float(np.float32(len(samples)) / np.float32(f.fs) * np.float32(1000))
        )
        feats = f._kaldi_fbank(samples.astype(np.float32) * np.float32(1 << 15), frame_length)
        if not len(feats):
            return np.zeros((0, f.output_size), np.float32)
        if f.lfr_m != 1 or f.lfr_n != 1:
            # WavFrontend's apply_lfr: the first frame repeated (lfr_m - 1) // 2 times in
            # front, then the windows of a final piece.
            padded = np.concatenate((np.repeat(feats[:1], (f.lfr_m - 1) // 2, axis=0), feats))
            feats, _, _ = _apply_lfr(padded, f.lfr_m, f.lfr_n, is_final=True)
        dim = feats.shape[1]
        return ((feats + f.cmvn[0:1, :dim]) * f.cmvn[1:2, :dim]).astype(np.float32)


def pad_rows(features: list[Floats]) -> tuple[Floats, npt.NDArray[np.int32]]:
    """Utterances' features ``[frames, dim]`` as one ``[rows, longest, dim]`` batch, zeros
    past each row's end, and each row's frame count: an offline graph's ``speech`` and
    ``speech_lengths``."""
    lengths = np.array([len(f) for f in features], np.int32)
    speech = np.zeros((len(features), int(lengths.max()), features[0].shape[1]), np.float32)
    for row, feats in enumerate(features):
        speech[row, : len(feats)] = feats
    return speech, lengths


def _frame_count(samples: int, frame_samples: int, shift_samples: int) -> int:
    count = int((samples - frame_samples) / shift_samples + 1)
    return count if count >= 1 and samples >= frame_samples else 0


def _apply_lfr(inputs: Floats, m: int, n: int, is_final: bool) -> tuple[Floats, Floats, int]:
    """``WavFrontendOnline.apply_lfr``: stack ``m`` frames every ``n``; the rest waits.

    funasr takes the windows with ``as_strided`` over the tensor's storage, which may read
    past the slice it is called on (never past the tensor): row r is frames r*n .. r*n+m-1.
    """
    total = inputs.shape[0]
    t_lfr = int(np.ceil((total - (m - 1) // 2) / n))
    splice_idx = t_lfr
    rows = t_lfr
    last_idx = (total - m) // n + 1
    num_padding = m - (total - last_idx * n)
    padded = inputs
    if is_final:
        if num_padding > 0:
            num_padding_f = (
                (2 * m - 2 * total + (t_lfr - 1 + last_idx) * n) / 2 * (t_lfr - last_idx)
            )
            padded = np.concatenate([inputs, *([inputs[-1:]] * int(num_padding_f))])
    elif num_padding > 0:
        rows = last_idx
        splice_idx = last_idx
    splice_idx = min(total - 1, splice_idx * n)
    flat = padded.reshape(-1)
    dim = inputs.shape[1]
    out = (
        np.stack([flat[r * n * dim : r * n * dim + m * dim] for r in range(rows)])
        if rows > 0
        else (np.zeros((0, m * dim), np.float32))
    )
    return out.astype(np.float32), inputs[splice_idx:], splice_idx


def position_encoding(start: int, frames: int, inv_timescales: Floats) -> Floats:
    """Rows ``start .. start+frames-1`` of ``StreamSinusoidalPositionEncoder`` (positions
    count from 1). ``inv_timescales`` come from torch at export time
    (``workers.models.export.paraformer``): the float32 product is then the same as
    torch's, and sin/cos are taken in float64 and rounded, within an ulp of torch's."""
    positions = np.arange(start + 1, start + frames + 1, dtype=np.float32)
    scaled = (positions[:, None] * inv_timescales[None, :]).astype(np.float64)
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


def load_sentence_postprocess() -> Callable[[list[str]], tuple[Any, ...]]:
    """funasr's own ``sentence_postprocess``, loaded from its file without importing the
    ``funasr`` package (whose ``__init__`` imports torch). The module is plain Python."""
    spec = importlib.util.find_spec("funasr")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("funasr is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "postprocess_utils.py"
    module_spec = importlib.util.spec_from_file_location("_funasr_postprocess_utils", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    function: Callable[[list[str]], tuple[Any, ...]] = module.sentence_postprocess
    return function


@dataclass(slots=True)
class OnlineFbankState(FrontendState):
    """A stream's :class:`FrontendState` for :class:`OnlineFbankFrontend`: also its own
    kaldi-native-fbank extractor, kept between calls, and how many of its frames were read."""

    fbank: Any = None
    frames_read: int = 0


class OnlineFbankFrontend(StreamingFrontend):
    """:class:`StreamingFrontend`'s features, bit for bit, from one fbank extractor per
    stream kept between calls (its state: :class:`OnlineFbankState`).

    funasr, and :class:`StreamingFrontend`, compute each call's frames with a new extractor,
    whose FFT and mel banks cost ~190 µs to build: more than a 60 ms stride's six frames
    take (the FSMN-VAD's strides). Frames start every shift from the stream's first sample
    however the audio is cut (``snip_edges``), and each frame's features are computed from
    its own samples only, so an extractor fed each call's new samples gives the same frames.
    """

    def _fbank(self, samples: Floats, state: FrontendState) -> tuple[Floats, Floats]:
        if not isinstance(state, OnlineFbankState):
            raise TypeError("OnlineFbankFrontend takes an OnlineFbankState")
        # The buffered samples as forward_fbank keeps them: the frontend's later steps use them.
        data = np.concatenate((state.input_cache, samples.astype(np.float32)))
        frames = _frame_count(len(data), self.frame_samples, self.shift_samples)
        keep = len(data) - frames * self.shift_samples
        state.input_cache = data[-keep:] if keep else data[len(data) :]
        if state.fbank is None:
            state.fbank = self._knf.OnlineFbank(self._fbank_options())
        if len(samples):
            scaled = samples.astype(np.float32) * np.float32(1 << 15)
            state.fbank.accept_waveform(float(self.fs), scaled.tolist())
        ready = int(state.fbank.num_frames_ready)
        if ready - state.frames_read != frames:
            raise RuntimeError(f"the kept extractor has {ready - state.frames_read} new frames")
        if not frames:
            return _EMPTY_WAVE, np.zeros((0, self.n_mels), np.float32)
        fbank = state.fbank
        feats = np.stack([fbank.get_frame(i) for i in range(state.frames_read, ready)])
        fbank.pop(frames)  # the extractor keeps its frames until told
        state.frames_read = ready
        used = data[: (frames - 1) * self.shift_samples + self.frame_samples]
        return used, feats.astype(np.float32)
