"""Reading the FSMN-VAD workers' answers."""

from __future__ import annotations

from gateway.whole.vad import SpeechEnded, SpeechStarted, vad_events


def test_funasr_segments_become_events_in_order() -> None:
    assert vad_events(()) == []
    assert vad_events(((220, -1),)) == [SpeechStarted(220 * 32)]
    assert vad_events(((-1, 2160),)) == [SpeechEnded(2160 * 32)]
    assert vad_events(((100, 900),)) == [SpeechStarted(3200), SpeechEnded(900 * 32)]
    assert vad_events(((-1, 900), (1000, -1))) == [SpeechEnded(900 * 32), SpeechStarted(32000)]
