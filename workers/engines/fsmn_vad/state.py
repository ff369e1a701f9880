"""FunASR's FSMN-VAD decisions for one stream, frame by frame, without torch.

A port of the per-frame state machine of ``funasr.models.fsmn_vad_streaming.model``
(``FsmnVADStreaming`` with its ``Stats`` and ``WindowDetector``, funasr 1.4.16): what
``forward`` does with a stride's frames once their scores are known (``ComputeDecibel``,
``ComputeScores``, ``DetectCommonFrames`` / ``DetectLastFrames``, ``DropCachedFrames`` and
the streaming segment list). Each method keeps its original's name in its docstring and its
original's steps and arithmetic (Python floats where funasr uses Python floats, float32
numpy where it uses numpy), so that a stream's segments are funasr's, frame for frame.

What is left out changes no segment:

- The audio itself. funasr keeps the stream's samples (``data_buf_all``, ``data_buf``) but
  reads only their lengths; this keeps the lengths.
- Of each frame's scores, only the silence pdfs' (``sil_pdf_ids``), which are all that
  ``GetFrameState`` reads.
- Write-only fields (``sil_frame``, ``pre_end_silence_detected``, ``max_time_out``, the
  segments' ``doa``), ``output_frame_probs``, and funasr's diagnostic ``print`` calls.
- funasr 1.4's dynamic end-silence schedule: it is off when ``max_end_silence_time`` is
  passed, as the ``fsmn-vad`` engine always passes it.

One deliberate difference: where funasr's ``PopDataBufTillFrame`` would loop forever (its
audio buffer shorter than a frame), this raises instead, failing the stream, not the worker.

funasr is MIT-licensed; this follows its 1.4.16 sources.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from workers.engines.fsmn_vad.window import (
    MULTIPLE_UTTERANCE_MODE,
    SINGLE_UTTERANCE_MODE,
    AudioChange,
    FrameState,
    MachineState,
    VadOptions,
    WindowDetector,
)

Floats = npt.NDArray[np.float32]
Segment = tuple[int, int]  # (start ms or -1, end ms or -1), as funasr's streaming output


@dataclass(slots=True)
class _SpeechBuf:  # E2EVadSpeechBufWithDoa, without its samples
    start_ms: int = 0
    end_ms: int = 0
    contain_seg_start_point: bool = False
    contain_seg_end_point: bool = False


def _slice_len(length: int, start: int) -> int:
    """``len(x[start:])`` for a sequence of ``length`` (Python's rules, negatives too)."""
    return len(range(length)[start:])


@dataclass(slots=True)
class StreamingVad:
    """One stream's VAD state (funasr's ``cache["stats"]`` and ``cache["windows_detector"]``)
    and the model's decisions on it. Feed each stride's frames to :meth:`accept`."""

    options: VadOptions
    window: WindowDetector = field(init=False)
    data_buf_start_frame: int = 0
    frm_cnt: int = 0
    latest_confirmed_speech_frame: int = 0
    lastest_confirmed_silence_frame: int = -1
    continous_silence_frame_count: int = 0
    vad_state_machine: MachineState = MachineState.START_POINT_NOT_DETECTED
    confirmed_start_frame: int = -1
    confirmed_end_frame: int = -1
    number_end_time_detected: int = 0
    noise_average_decibel: float = -100.0
    next_seg: bool = True
    output_data_buf: list[_SpeechBuf] = field(default_factory=list)
    output_data_buf_offset: int = 0
    max_end_sil_frame_cnt_thresh: int = 0
    decibel: list[float] = field(default_factory=list)
    silence: list[float] = field(default_factory=list)  # per frame, its sil pdfs' sum
    data_buf_all_len: int | None = None  # funasr's data_buf_all is None until a frame
    data_buf_len: int = 0
    last_drop_frames: int = 0
    nn_eval_block_size: int = 8

    def __post_init__(self) -> None:
        self.window = WindowDetector(self.options)
        self.max_end_sil_frame_cnt_thresh = (
            self.options.max_end_silence_time - self.options.speech_to_sil_time_thres
        )

    # -- a stride ------------------------------------------------------------------------

    def accept(self, waveform: Floats, silence: Floats, is_final: bool) -> list[Segment]:
        """``forward`` with ``is_streaming_input``: one stride's ``F`` frames, their samples
        (``waveform``, ``(F - 1) * shift + frame`` of them, the frontend's aligned span) and
        their silence-pdf scores (``silence``, [F, len(sil_pdf_ids)]); the new segments."""
        frames = silence.shape[0]
        if frames == 0:
            return []
        self._compute_decibel(waveform, frames)
        self._compute_scores(silence)
        if not is_final:
            self._detect_common_frames()
        else:
            self._detect_last_frames()
        self._drop_cached_frames(self.data_buf_start_frame)
        return self._new_segments()

    def _compute_decibel(self, waveform: Floats, frame_count: int) -> None:
        """``ComputeDecibel``, the frame count given."""
        options = self.options
        frame_sample_length = int(options.frame_length_ms * options.sample_rate / 1000)
        frame_shift_length = int(options.frame_in_ms * options.sample_rate / 1000)
        aligned_sample_count = (frame_count - 1) * frame_shift_length + frame_sample_length
        if waveform.shape[0] != aligned_sample_count:
            raise RuntimeError(
                "VAD score frames and waveform samples are not aligned: "
                f"expected {aligned_sample_count}, got {waveform.shape[0]}"
            )
        if self.data_buf_all_len is None:
            self.data_buf_all_len = aligned_sample_count
        else:
            self.data_buf_all_len += frame_count * frame_shift_length
        offset = max(self.data_buf_start_frame - self.last_drop_frames, 0) * frame_shift_length
        self.data_buf_len = _slice_len(self.data_buf_all_len, offset)
        offsets = np.arange(0, waveform.shape[0] - frame_sample_length + 1, frame_shift_length)
        frames = waveform[offsets[:, np.newaxis] + np.arange(frame_sample_length)]
        decibel = 10 * np.log10(np.sum(np.square(frames), axis=1) + 0.000001)
        self.decibel.extend(decibel.tolist())

    def _compute_scores(self, silence: Floats) -> None:
        """``ComputeScores``, the encoder already run: keep the silence pdfs' sum."""
        self.nn_eval_block_size = silence.shape[0]
        self.frm_cnt += silence.shape[0]
        rows: list[list[float]] = silence.tolist()
        if len(self.options.sil_pdf_ids) > 1:
            # funasr: sum(scores[0][t][i].item() for i in sil_pdf_ids), in that order.
            self.silence.extend(sum(row) for row in rows)
        else:
            self.silence.extend(row[0] for row in rows)

    def _detect_common_frames(self) -> None:
        """``DetectCommonFrames``."""
        if self.vad_state_machine is MachineState.END_POINT_DETECTED:
            return
        for i in range(self.nn_eval_block_size - 1, -1, -1):
            frame_state = self._get_frame_state(self.frm_cnt - 1 - i - self.last_drop_frames)
            self._detect_one_frame(frame_state, self.frm_cnt - 1 - i, False)

    def _detect_last_frames(self) -> None:
        """``DetectLastFrames``."""
        if self.vad_state_machine is MachineState.END_POINT_DETECTED:
            return
        for i in range(self.nn_eval_block_size - 1, -1, -1):
            frame_state = self._get_frame_state(self.frm_cnt - 1 - i - self.last_drop_frames)
            if i != 0:
                self._detect_one_frame(frame_state, self.frm_cnt - 1 - i, False)
            else:
                self._detect_one_frame(frame_state, self.frm_cnt - 1, True)

    def _new_segments(self) -> list[Segment]:
        """``forward``'s segment list, streaming form: ``[beg, -1]``, ``[-1, end]``,
        ``[beg, end]``."""
        segments: list[Segment] = []
        buf = self.output_data_buf
        for i in range(self.output_data_buf_offset, len(buf)):
            seg = buf[i]
            if not seg.contain_seg_start_point:
                continue
            if not self.next_seg and not seg.contain_seg_end_point:
                continue
            start_ms = seg.start_ms if self.next_seg else -1
            if seg.contain_seg_end_point:
                end_ms = seg.end_ms
                self.next_seg = True
                self.output_data_buf_offset += 1
            else:
                end_ms = -1
                self.next_seg = False
            segments.append((start_ms, end_ms))
        return segments

    # -- funasr's per-frame steps --------------------------------------------------------

    def _get_frame_state(self, t: int) -> FrameState:
        """``GetFrameState``. ``t`` may be negative (funasr indexes from the end then)."""
        options = self.options
        if t >= len(self.decibel):
            return FrameState.SIL
        cur_decibel = self.decibel[t]
        cur_snr = cur_decibel - self.noise_average_decibel
        if cur_decibel < options.decibel_thres:
            return FrameState.SIL
        sum_score = 0.0
        noise_prob = 0.0
        if len(options.sil_pdf_ids) > 0:
            sum_score = self.silence[t]
            noise_prob = math.log(sum_score) * options.speech_2_noise_ratio
            total_score = 1.0
            sum_score = total_score - sum_score
        speech_prob = math.log(sum_score)
        if math.exp(speech_prob) >= math.exp(noise_prob) + options.speech_noise_thres:
            if cur_snr >= options.snr_thres and cur_decibel >= options.decibel_thres:
                return FrameState.SPEECH
            return FrameState.SIL
        if self.noise_average_decibel < -99.9:
            self.noise_average_decibel = cur_decibel
        else:
            self.noise_average_decibel = (
                cur_decibel
                + self.noise_average_decibel * (options.noise_frame_num_used_for_snr - 1)
            ) / options.noise_frame_num_used_for_snr
        return FrameState.SIL

    def _detect_one_frame(
        self, cur_frm_state: FrameState, cur_frm_idx: int, is_final_frame: bool
    ) -> None:
        """``FsmnVADStreaming.DetectOneFrame``."""
        options = self.options
        tmp_cur_frm_state = FrameState.INVALID
        if cur_frm_state is FrameState.SPEECH:
            if math.fabs(1.0) > options.fe_prior_thres:
                tmp_cur_frm_state = FrameState.SPEECH
            else:
                tmp_cur_frm_state = FrameState.SIL
        elif cur_frm_state is FrameState.SIL:
            tmp_cur_frm_state = FrameState.SIL
        state_change = self.window.detect_one_frame(tmp_cur_frm_state)
        frm_shift_in_ms = options.frame_in_ms
        max_segment_frames = options.max_single_segment_time / frm_shift_in_ms
        if state_change is AudioChange.SIL2SPEECH:
            self.continous_silence_frame_count = 0
            if self.vad_state_machine is MachineState.START_POINT_NOT_DETECTED:
                start_frame = max(
                    self.data_buf_start_frame, cur_frm_idx - self._latency_frm_num_at_start_point()
                )
                self._on_voice_start(start_frame)
                self.vad_state_machine = MachineState.IN_SPEECH_SEGMENT
                for t in range(start_frame + 1, cur_frm_idx + 1):
                    self._on_voice_detected(t)
            elif self.vad_state_machine is MachineState.IN_SPEECH_SEGMENT:
                for t in range(self.latest_confirmed_speech_frame + 1, cur_frm_idx):
                    self._on_voice_detected(t)
                if cur_frm_idx - self.confirmed_start_frame + 1 > max_segment_frames:
                    self._on_voice_end(cur_frm_idx, False, False)
                    self.vad_state_machine = MachineState.END_POINT_DETECTED
                elif not is_final_frame:
                    self._on_voice_detected(cur_frm_idx)
                else:
                    self._maybe_on_voice_end_if_last_frame(is_final_frame, cur_frm_idx)
        elif state_change is AudioChange.SPEECH2SIL or state_change is AudioChange.SPEECH2SPEECH:
            # funasr's two branches differ only in SPEECH2SPEECH's write-only max_time_out.
            self.continous_silence_frame_count = 0
            if self.vad_state_machine is MachineState.IN_SPEECH_SEGMENT:
                if cur_frm_idx - self.confirmed_start_frame + 1 > max_segment_frames:
                    self._on_voice_end(cur_frm_idx, False, False)
                    self.vad_state_machine = MachineState.END_POINT_DETECTED
                elif not is_final_frame:
                    self._on_voice_detected(cur_frm_idx)
                else:
                    self._maybe_on_voice_end_if_last_frame(is_final_frame, cur_frm_idx)
        elif state_change is AudioChange.SIL2SIL:
            self.continous_silence_frame_count += 1
            if self.vad_state_machine is MachineState.START_POINT_NOT_DETECTED:
                # silence timeout: a zero-length decision
                if (
                    options.detect_mode == SINGLE_UTTERANCE_MODE
                    and (
                        self.continous_silence_frame_count * frm_shift_in_ms
                        > options.max_start_silence_time
                    )
                ) or (is_final_frame and self.number_end_time_detected == 0):
                    for t in range(self.lastest_confirmed_silence_frame + 1, cur_frm_idx):
                        self._on_silence_detected(t)
                    self._on_voice_start(0, True)
                    self._on_voice_end(0, True, False)
                    self.vad_state_machine = MachineState.END_POINT_DETECTED
                else:
                    latency = self._latency_frm_num_at_start_point()
                    if cur_frm_idx >= latency:
                        self._on_silence_detected(cur_frm_idx - latency)
            elif self.vad_state_machine is MachineState.IN_SPEECH_SEGMENT:
                if (
                    self.continous_silence_frame_count * frm_shift_in_ms
                    >= self.max_end_sil_frame_cnt_thresh
                ):
                    lookback_frame = int(self.max_end_sil_frame_cnt_thresh / frm_shift_in_ms)
                    if options.do_extend:
                        lookback_frame -= int(options.lookahead_time_end_point / frm_shift_in_ms)
                        lookback_frame -= 1
                        lookback_frame = max(0, lookback_frame)
                    self._on_voice_end(cur_frm_idx - lookback_frame, False, False)
                    self.vad_state_machine = MachineState.END_POINT_DETECTED
                elif cur_frm_idx - self.confirmed_start_frame + 1 > max_segment_frames:
                    self._on_voice_end(cur_frm_idx, False, False)
                    self.vad_state_machine = MachineState.END_POINT_DETECTED
                elif options.do_extend and not is_final_frame:
                    if self.continous_silence_frame_count <= int(
                        options.lookahead_time_end_point / frm_shift_in_ms
                    ):
                        self._on_voice_detected(cur_frm_idx)
                else:
                    self._maybe_on_voice_end_if_last_frame(is_final_frame, cur_frm_idx)
        if (
            self.vad_state_machine is MachineState.END_POINT_DETECTED
            and options.detect_mode == MULTIPLE_UTTERANCE_MODE
        ):
            self._reset_detection()

    def _latency_frm_num_at_start_point(self) -> int:
        """``LatencyFrmNumAtStartPoint``."""
        vad_latency = self.window.win_size_frame
        if self.options.do_extend:
            vad_latency += int(self.options.lookback_time_start_point / self.options.frame_in_ms)
        return vad_latency

    def _on_silence_detected(self, valid_frame: int) -> None:
        """``OnSilenceDetected``."""
        self.lastest_confirmed_silence_frame = valid_frame
        if self.vad_state_machine is MachineState.START_POINT_NOT_DETECTED:
            self._pop_data_buf_till_frame(valid_frame)

    def _on_voice_detected(self, valid_frame: int) -> None:
        """``OnVoiceDetected``."""
        self.latest_confirmed_speech_frame = valid_frame
        self._pop_data_to_output_buf(valid_frame, 1, False, False)

    def _on_voice_start(self, start_frame: int, fake_result: bool = False) -> None:
        """``OnVoiceStart``."""
        if self.confirmed_start_frame == -1:
            self.confirmed_start_frame = start_frame
        if not fake_result and self.vad_state_machine is MachineState.START_POINT_NOT_DETECTED:
            self._pop_data_to_output_buf(self.confirmed_start_frame, 1, True, False)

    def _on_voice_end(self, end_frame: int, fake_result: bool, is_last_frame: bool) -> None:
        """``OnVoiceEnd``. (``is_last_frame`` only sized a buffer funasr then ignores.)"""
        for t in range(self.latest_confirmed_speech_frame + 1, end_frame):
            self._on_voice_detected(t)
        if self.confirmed_end_frame == -1:
            self.confirmed_end_frame = end_frame
        if not fake_result:
            self._pop_data_to_output_buf(self.confirmed_end_frame, 1, False, True)
        self.number_end_time_detected += 1

    def _maybe_on_voice_end_if_last_frame(self, is_final_frame: bool, cur_frm_idx: int) -> None:
        """``MaybeOnVoiceEndIfLastFrame``."""
        if is_final_frame:
            self._on_voice_end(cur_frm_idx, False, True)
            self.vad_state_machine = MachineState.END_POINT_DETECTED

    def _pop_data_buf_till_frame(self, frame_idx: int) -> None:
        """``PopDataBufTillFrame``."""
        shift = int(self.options.frame_in_ms * self.options.sample_rate / 1000)
        while self.data_buf_start_frame < frame_idx:
            if self.data_buf_len < shift:
                raise RuntimeError(
                    f"VAD buffer holds no frame before frame {frame_idx}"
                    " (funasr's PopDataBufTillFrame would loop forever here)"
                )
            self.data_buf_start_frame += 1
            assert self.data_buf_all_len is not None  # a frame has been seen
            self.data_buf_len = _slice_len(
                self.data_buf_all_len, (self.data_buf_start_frame - self.last_drop_frames) * shift
            )

    def _pop_data_to_output_buf(
        self,
        start_frm: int,
        frm_cnt: int,
        first_frm_is_start_point: bool,
        last_frm_is_end_point: bool,
    ) -> None:
        """``PopDataToOutputBuf``, less its sample counts (funasr only prints about them;
        ``end_point_is_sent_end`` only sized them, so it is not taken)."""
        self._pop_data_buf_till_frame(start_frm)
        frame_in_ms = self.options.frame_in_ms
        if len(self.output_data_buf) == 0 or first_frm_is_start_point:
            start_ms = start_frm * frame_in_ms
            self.output_data_buf.append(_SpeechBuf(start_ms=start_ms, end_ms=start_ms))
        cur_seg = self.output_data_buf[-1]
        self.data_buf_start_frame += frm_cnt
        cur_seg.end_ms = (start_frm + frm_cnt) * frame_in_ms
        if first_frm_is_start_point:
            cur_seg.contain_seg_start_point = True
        if last_frm_is_end_point:
            cur_seg.contain_seg_end_point = True

    def _reset_detection(self) -> None:
        """``ResetDetection``."""
        self.continous_silence_frame_count = 0
        self.latest_confirmed_speech_frame = 0
        self.lastest_confirmed_silence_frame = -1
        self.confirmed_start_frame = -1
        self.confirmed_end_frame = -1
        self.vad_state_machine = MachineState.START_POINT_NOT_DETECTED
        self.window.reset()
        if self.output_data_buf:
            last = self.output_data_buf[-1]
            if not last.contain_seg_end_point:
                raise RuntimeError("VAD reset inside a segment")  # funasr asserts this
            self._drop_cached_frames(int(last.end_ms / self.options.frame_in_ms))

    def _drop_cached_frames(self, drop_frames: int) -> None:
        """``DropCachedFrames``: forget scores, decibels and samples before a frame."""
        if drop_frames > self.frm_cnt:
            raise RuntimeError(
                f"Cannot drop through frame {drop_frames}; only {self.frm_cnt} frames exist"
            )
        real_drop_frames = drop_frames - self.last_drop_frames
        if real_drop_frames <= 0:
            return
        shift = int(self.options.frame_in_ms * self.options.sample_rate / 1000)
        assert self.data_buf_all_len is not None  # frames exist
        self.data_buf_all_len = _slice_len(self.data_buf_all_len, real_drop_frames * shift)
        self.decibel = self.decibel[real_drop_frames:]
        self.silence = self.silence[real_drop_frames:]
        self.last_drop_frames = drop_frames
        offset = max(self.data_buf_start_frame - self.last_drop_frames, 0) * shift
        self.data_buf_len = _slice_len(self.data_buf_all_len, offset)


def silence_columns(scores: Floats, sil_pdf_ids: Sequence[int]) -> Floats:
    """The columns of ``[frames, pdfs]`` scores that :meth:`StreamingVad.accept` takes."""
    return scores[:, list(sil_pdf_ids)]
