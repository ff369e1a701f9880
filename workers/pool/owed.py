"""What a worker owes: the answers it has not sent yet, and how long it has been silent.

Sans I/O: the handle tells it what was sent and what was answered, and the pool's watchdog
reads ``seconds_without_progress`` and ``owed_audio_seconds`` to tell a hung worker from a
busy one.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from shared.messages import SAMPLE_RATE


class OwedWork:
    """Every audio piece sent is owed exactly one answer (a result or a failure), and the
    worker answers them in the order sent.

    ``_owed`` holds, for each piece not yet answered, the audio (samples) it costs the
    worker: its own, or for a whole-utterance engine's final piece the stream's whole audio
    (the engine decodes then; ``_utterances`` counts what each stream has sent so far).
    ``_owed_since`` is when the worker last made progress while owing any, and
    ``_budget_samples`` the audio it owed then, plus the whole-utterance finals sent since:
    audio sent while it is silent cannot be in the step it is busy with, and must not keep
    a hung worker alive for as long as its clients send. Whether the engine decodes whole
    utterances, the worker says when it is ready.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.whole_utterances = False
        self._utterances: dict[int, int] = {}
        self._owed: collections.deque[int] = collections.deque()
        self._owed_samples = 0
        self._budget_samples = 0
        self._owed_since: float | None = None

    def sent(self, stream_id: int, length_bytes: int, final: bool) -> None:
        """An audio piece of ``length_bytes`` went to the worker."""
        cost = length_bytes // 2
        whole_utterance = self.whole_utterances and final
        if self.whole_utterances:
            sent = self._utterances.pop(stream_id, 0) + cost
            if final:
                cost = sent
            else:
                self._utterances[stream_id] = sent
        self._owed.append(cost)
        self._owed_samples += cost
        if self._owed_since is None:
            self._owed_since = self._clock()
            self._budget_samples = cost
        elif whole_utterance:
            self._budget_samples += cost

    def answered(self) -> None:
        """The oldest piece owed got its result or its failure."""
        if self._owed:
            self._owed_samples -= self._owed.popleft()

    def progressed(self) -> None:
        """A batch of answers was read: the silence, if any, restarts now."""
        self._owed_since = self._clock() if self._owed else None
        self._budget_samples = self._owed_samples

    def forget(self, stream_id: int) -> None:
        """The stream ended or was dropped: what it sent no longer adds to a final's cost."""
        self._utterances.pop(stream_id, None)

    def forget_all(self) -> None:
        self._utterances.clear()

    def seconds_without_progress(self) -> float:
        """How long the worker has owed answers without sending any (0 if it owes none)."""
        owed_since = self._owed_since
        return 0.0 if owed_since is None else self._clock() - owed_since

    @property
    def owed_audio_seconds(self) -> float:
        """The audio the worker owes answers for, in seconds, as its hang timeout counts
        it: what it owed when it last made progress (or began to owe), and the
        whole-utterance decodes asked of it since."""
        return self._budget_samples / SAMPLE_RATE
