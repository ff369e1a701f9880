"""FunASR's FSMN-VAD options and its sliding window of frame decisions, without torch.

Ported from ``funasr.models.fsmn_vad_streaming.model`` (funasr 1.4.16, MIT-licensed), as
``workers.engines.fsmn_vad.state``, which uses them: ``VADXOptions``, ``WindowDetector`` and
the enums their decisions are made of, each named after its original.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class MachineState(enum.Enum):  # funasr's VadStateMachine
    START_POINT_NOT_DETECTED = 1
    IN_SPEECH_SEGMENT = 2
    END_POINT_DETECTED = 3


class FrameState(enum.Enum):  # funasr's FrameState
    INVALID = -1
    SPEECH = 1
    SIL = 0


class AudioChange(enum.Enum):  # funasr's AudioChangeState
    SPEECH2SPEECH = 0
    SPEECH2SIL = 1
    SIL2SIL = 2
    SIL2SPEECH = 3
    NO_BEGIN = 4
    INVALID = 5


SINGLE_UTTERANCE_MODE = 0  # funasr's VadDetectMode.kVadSingleUtteranceDetectMode
MULTIPLE_UTTERANCE_MODE = 1


@dataclass(frozen=True, slots=True)
class VadOptions:
    """``VADXOptions``: the model's ``model_conf``, with funasr's defaults. Only the fields
    that a decision reads."""

    sample_rate: int = 16000
    detect_mode: int = MULTIPLE_UTTERANCE_MODE
    max_end_silence_time: int = 800
    max_start_silence_time: int = 3000
    window_size_ms: int = 200
    sil_to_speech_time_thres: int = 150
    speech_to_sil_time_thres: int = 150
    speech_2_noise_ratio: float = 1.0
    do_extend: int = 1
    lookback_time_start_point: int = 200
    lookahead_time_end_point: int = 100
    max_single_segment_time: int = 60000
    snr_thres: float = -100.0
    noise_frame_num_used_for_snr: int = 100
    decibel_thres: float = -100.0
    speech_noise_thres: float = 0.6
    fe_prior_thres: float = 1e-4
    silence_pdf_num: int = 1
    sil_pdf_ids: tuple[int, ...] = (0,)
    frame_in_ms: int = 10
    frame_length_ms: int = 25

    @classmethod
    def from_model_conf(cls, conf: Mapping[str, Any]) -> VadOptions:
        """The options funasr builds from ``config.yaml``'s ``model_conf`` (unknown keys
        ignored, as ``VADXOptions(**kwargs)`` ignores them)."""
        known = {name: conf[name] for name in cls.__slots__ if name in conf}
        if "sil_pdf_ids" in known:
            known["sil_pdf_ids"] = tuple(int(i) for i in known["sil_pdf_ids"])
        options = cls(**known)
        if len(options.sil_pdf_ids) != options.silence_pdf_num:
            # funasr asserts this at the first frame it scores.
            raise ValueError("model_conf: silence_pdf_num is not the number of sil_pdf_ids")
        return options


class WindowDetector:
    """``WindowDetector``: speech or silence over a sliding window of frame decisions."""

    __slots__ = (
        "cur_win_pos",
        "pre_frame_state",
        "sil_to_speech_frmcnt_thres",
        "speech_to_sil_frmcnt_thres",
        "win_size_frame",
        "win_state",
        "win_sum",
    )

    def __init__(self, options: VadOptions) -> None:
        frame_size_ms = options.frame_in_ms
        self.win_size_frame = int(options.window_size_ms / frame_size_ms)
        self.sil_to_speech_frmcnt_thres = int(options.sil_to_speech_time_thres / frame_size_ms)
        self.speech_to_sil_frmcnt_thres = int(options.speech_to_sil_time_thres / frame_size_ms)
        self.reset()

    def reset(self) -> None:
        self.cur_win_pos = 0
        self.win_sum = 0
        self.win_state = [0] * self.win_size_frame
        self.pre_frame_state = FrameState.SIL

    def detect_one_frame(self, frame_state: FrameState) -> AudioChange:
        """``WindowDetector.DetectOneFrame``."""
        if frame_state is FrameState.SPEECH:
            cur_frame_state = 1
        elif frame_state is FrameState.SIL:
            cur_frame_state = 0
        else:
            return AudioChange.INVALID
        self.win_sum -= self.win_state[self.cur_win_pos]
        self.win_sum += cur_frame_state
        self.win_state[self.cur_win_pos] = cur_frame_state
        self.cur_win_pos = (self.cur_win_pos + 1) % self.win_size_frame
        if (
            self.pre_frame_state is FrameState.SIL
            and self.win_sum >= self.sil_to_speech_frmcnt_thres
        ):
            self.pre_frame_state = FrameState.SPEECH
            return AudioChange.SIL2SPEECH
        if (
            self.pre_frame_state is FrameState.SPEECH
            and self.win_sum <= self.speech_to_sil_frmcnt_thres
        ):
            self.pre_frame_state = FrameState.SIL
            return AudioChange.SPEECH2SIL
        if self.pre_frame_state is FrameState.SIL:
            return AudioChange.SIL2SIL
        return AudioChange.SPEECH2SPEECH
