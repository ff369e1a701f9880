"""Where long audio is cut (``gateway.audio.segment``), and the budget of held audio."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gateway.audio.endpointer import FRAME_BYTES, EndpointSettings, EnergyEndpointer
from gateway.audio.segment import Segment, cut, join_texts, silence_by_energy, silence_from_speech
from gateway.limits.budget import AudioBudget, HeldAudio
from shared.errors import OverCapacityError

BYTES_PER_S = 32000
THRESHOLD = EndpointSettings().threshold


def loud(seconds: float, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    return rng.integers(-8000, 8000, int(seconds * 16000), dtype=np.int16).astype("<i2").tobytes()


def quiet(seconds: float) -> bytes:
    return bytes(2 * int(seconds * 16000))


def test_short_audio_is_one_segment() -> None:
    assert cut(10 * BYTES_PER_S, 10 * BYTES_PER_S) == [Segment(0, 10 * BYTES_PER_S)]


def test_without_a_mask_segments_end_at_the_limit_and_cover_everything() -> None:
    segments = cut(25 * BYTES_PER_S, 10 * BYTES_PER_S)
    limit = 10 * BYTES_PER_S // FRAME_BYTES * FRAME_BYTES
    assert [s.end - s.start for s in segments[:-1]] == [limit, limit]
    assert segments[0].start == 0
    assert segments[-1].end == 25 * BYTES_PER_S
    assert all(a.end == b.start for a, b in itertools.pairwise(segments))


def test_the_cut_goes_in_the_middle_of_the_longest_pause_of_the_second_half() -> None:
    # 0-4 s speech, 4.0-4.3 s pause (too early: first half), 4.3-7 s speech,
    # 7.0-7.9 s pause, 7.9-8.5 speech, 8.5-8.6 short pause, speech to 12 s.
    pcm = (
        loud(4.0) + quiet(0.3) + loud(2.7, 1) + quiet(0.9) + loud(0.6, 2) + quiet(0.1)
        + loud(3.4, 3)
    )  # fmt: skip
    silent = silence_by_energy(pcm, THRESHOLD)
    segments = cut(len(pcm), 10 * BYTES_PER_S, silent)
    assert len(segments) == 2
    at_s = segments[0].end / BYTES_PER_S
    assert 7.0 < at_s < 7.9
    assert abs(at_s - 7.45) < 0.06  # the middle, to a 30 ms frame
    assert segments[0].end % FRAME_BYTES == 0


def test_loud_audio_with_no_pause_is_cut_at_the_limit() -> None:
    pcm = loud(12.0)
    segments = cut(len(pcm), 5 * BYTES_PER_S, silence_by_energy(pcm, THRESHOLD))
    assert all(s.end - s.start <= 5 * BYTES_PER_S for s in segments)
    assert len(segments) == 3


def test_the_energy_mask_is_per_30_ms_frame() -> None:
    pcm = loud(0.3) + quiet(0.3) + b"\x00\x01"  # a piece of a frame at the end: not framed
    mask = silence_by_energy(pcm, THRESHOLD)
    assert mask.tolist() == [False] * 10 + [True] * 10


def test_the_speech_mask_is_everything_outside_the_regions() -> None:
    mask = silence_from_speech([(FRAME_BYTES, 3 * FRAME_BYTES - 1)], 5 * FRAME_BYTES)
    assert mask.tolist() == [True, False, False, True, True]


def test_texts_are_joined_with_a_space_leaving_out_empty_ones() -> None:
    assert join_texts(["a b", "", "c"]) == "a b c"


def test_a_sentence_with_no_pause_ends_at_the_limit() -> None:
    endpointer = EnergyEndpointer(EndpointSettings(), max_sentence_bytes=BYTES_PER_S)
    ends = endpointer.push(loud(2.5))
    limit = BYTES_PER_S // FRAME_BYTES * FRAME_BYTES  # whole frames, never past the limit
    assert [end.offset for end in ends] == [limit, limit]
    assert [end.speech_start for end in ends] == [0, 0]


def test_the_budget_refuses_what_would_go_over_and_gives_back_at_the_end() -> None:
    budget = AudioBudget(100)
    first, second = HeldAudio(budget), HeldAudio(budget)
    first.take(60)
    with pytest.raises(OverCapacityError, match="ASR_MAX_BUFFERED_SECONDS"):
        second.take(41)
    assert budget.held == 60
    assert second.held == 0
    second.take(40)
    with pytest.raises(OverCapacityError):
        budget.check_room()
    first.release_all()
    first.release_all()
    assert budget.held == 40
    budget.check_room()
