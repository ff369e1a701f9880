"""Reading the FSMN-VAD workers' answers."""

from __future__ import annotations

import pytest

from gateway.vad import SpeechEnded, SpeechStarted, vad_events
from shared.errors import WorkerError


def test_funasr_segments_become_events_in_order() -> None:
    assert vad_events("[]") == []
    assert vad_events("[[220, -1]]") == [SpeechStarted(220 * 32)]
    assert vad_events("[[-1, 2160]]") == [SpeechEnded(2160 * 32)]
    assert vad_events("[[100, 900]]") == [SpeechStarted(3200), SpeechEnded(900 * 32)]
    assert vad_events("[[-1, 900], [1000, -1]]") == [SpeechEnded(900 * 32), SpeechStarted(32000)]


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", "[[1]]", "{}"])
def test_an_unreadable_answer_is_a_worker_error(text: str) -> None:
    with pytest.raises(WorkerError, match="VAD worker"):
        vad_events(text)
