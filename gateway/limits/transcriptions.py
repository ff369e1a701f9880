"""How many file transcriptions run at once (``POST /v1/transcribe`` and OpenAI's
``/v1/audio/transcriptions`` together)."""

from __future__ import annotations


class TranscriptionLimiter:
    """At most ``limit`` transcriptions at once (ASR_TRANSCRIBE_CONCURRENCY); the next
    request is refused at once (429), never queued."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.busy = 0

    def try_take(self) -> bool:
        """Take a place; False when all ``limit`` are taken."""
        if self.busy >= self.limit:
            return False
        self.busy += 1
        return True

    def give(self) -> None:
        self.busy -= 1
