"""The energy endpointer that cuts 2pass utterances into sentences."""

from __future__ import annotations

import numpy as np

from gateway.audio.endpointer import FRAME_BYTES, EndpointSettings, EnergyEndpointer, SentenceEnd


def loud(ms: int) -> bytes:
    rng = np.random.default_rng(ms)
    return rng.integers(-10000, 10000, ms * 16, dtype=np.int16).astype("<i2").tobytes()


def quiet(ms: int) -> bytes:
    return bytes(ms * 32)


def test_a_sentence_ends_after_speech_and_enough_silence() -> None:
    endpointer = EnergyEndpointer(EndpointSettings(silence_ms=300, min_speech_ms=150))
    assert endpointer.push(loud(600)) == []
    assert endpointer.push(quiet(270)) == []
    (end,) = endpointer.push(quiet(60))
    # The speech and the silence that ended it; the speech began at once.
    assert end == SentenceEnd(600 * 32 + 300 * 32, speech_start=0)


def test_silence_alone_or_short_noise_never_ends_a_sentence() -> None:
    endpointer = EnergyEndpointer(EndpointSettings(silence_ms=300, min_speech_ms=150))
    assert endpointer.push(quiet(3000)) == []
    assert endpointer.push(loud(90) + quiet(3000)) == []  # a click, not speech


def test_several_sentences_in_one_push_count_from_the_previous_end() -> None:
    endpointer = EnergyEndpointer(EndpointSettings(silence_ms=300, min_speech_ms=150))
    ends = endpointer.push(loud(300) + quiet(300) + loud(300) + quiet(300))
    assert ends == [SentenceEnd(600 * 32, 0), SentenceEnd(600 * 32, 0)]


def test_the_speech_start_is_the_first_loud_frame_of_the_sentence() -> None:
    endpointer = EnergyEndpointer(EndpointSettings(silence_ms=300, min_speech_ms=150))
    assert endpointer.push(quiet(450) + loud(300)) == []
    assert endpointer.speech_start == 450 * 32
    (end,) = endpointer.push(quiet(300) + quiet(90) + loud(300))
    assert end == SentenceEnd((450 + 300 + 300) * 32, 450 * 32)
    assert endpointer.speech_start == 90 * 32  # the next sentence's, from the end above


def test_frames_split_across_pushes_are_joined() -> None:
    endpointer = EnergyEndpointer(EndpointSettings(silence_ms=300, min_speech_ms=150))
    audio = loud(600) + quiet(330)
    ends = []
    for start in range(0, len(audio), 777):  # odd sizes, mid-frame and mid-sample
        ends += endpointer.push(audio[start : start + 777])
    assert ends == [SentenceEnd(900 * 32, 0)]
    assert ends[0].offset % FRAME_BYTES == 0


def test_the_threshold_follows_the_dbfs_setting() -> None:
    assert EndpointSettings(energy_dbfs=-20.0).threshold == 32768.0 * 0.1
    soft = np.full(480 * 33, 500, dtype=np.int16).astype("<i2").tobytes()  # about -36 dBFS
    loud_enough = EnergyEndpointer(EndpointSettings(energy_dbfs=-40.0, silence_ms=300))
    too_quiet = EnergyEndpointer(EndpointSettings(energy_dbfs=-30.0, silence_ms=300))
    assert loud_enough.push(soft + quiet(300)) == [SentenceEnd(len(soft) + 300 * 32, 0)]
    assert too_quiet.push(soft + quiet(300)) == []
