"""What a worker owes and how long it has been silent, on a clock the test turns: a worker
that owes nothing is never silent however long it is quiet, audio sent to a silent worker
does not lengthen its budget, and a whole-utterance final owes the whole utterance."""

from __future__ import annotations

from workers.pool.owed import OwedWork

SECOND = 16_000 * 2  # bytes of audio in a second


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_that_owes_nothing_is_never_silent() -> None:
    clock = Clock()
    owed = OwedWork(clock)
    clock.now += 3600
    assert owed.seconds_without_progress() == 0.0
    owed.sent(1, SECOND, final=False)
    owed.answered()
    owed.progressed()
    clock.now += 3600  # quiet, owing nothing: still not silent
    assert owed.seconds_without_progress() == 0.0


def test_silence_counts_from_the_last_progress_while_owing() -> None:
    clock = Clock()
    owed = OwedWork(clock)
    owed.sent(1, SECOND, final=False)
    owed.sent(1, SECOND, final=False)
    clock.now += 2.0
    assert owed.seconds_without_progress() == 2.0
    owed.answered()
    owed.progressed()
    assert owed.seconds_without_progress() == 0.0  # progress, one piece still owed
    clock.now += 1.5
    assert owed.seconds_without_progress() == 1.5
    assert owed.owed_audio_seconds == 1.0


def test_audio_sent_to_a_silent_worker_does_not_lengthen_its_budget() -> None:
    clock = Clock()
    owed = OwedWork(clock)
    owed.sent(1, SECOND, final=False)
    for _ in range(10):  # its clients keep sending while it hangs
        clock.now += 1.0
        owed.sent(2, SECOND, final=False)
    assert owed.owed_audio_seconds == 1.0
    assert owed.seconds_without_progress() == 10.0


def test_a_whole_utterance_final_owes_the_whole_utterance() -> None:
    clock = Clock()
    owed = OwedWork(clock)
    owed.whole_utterances = True
    owed.sent(7, 3 * SECOND, final=False)
    owed.answered()
    owed.progressed()
    owed.sent(7, 2 * SECOND, final=True)  # the decode of all five seconds happens now
    assert owed.owed_audio_seconds == 5.0
