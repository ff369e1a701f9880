"""How many file transcriptions run at once (``POST /v1/transcribe`` and OpenAI's
``/v1/audio/transcriptions`` together), and how many of them one client address may hold:
a place is held while the body arrives, so that a few slow uploads from one address took
every place (``ASR_UPLOAD_MIN_BYTES_PER_SECOND`` makes holding one cost bandwidth too)."""

from __future__ import annotations

from collections import Counter
from typing import Literal

Refused = Literal["busy", "client_share"]


class TranscriptionLimiter:
    """At most ``limit`` transcriptions at once (ASR_TRANSCRIBE_CONCURRENCY), at most
    ``per_client`` of one address (ASR_TRANSCRIBE_CONCURRENCY_PER_CLIENT; 0: no share of
    its own); the next request is refused at once (429), never queued."""

    def __init__(self, limit: int, per_client: int = 0) -> None:
        self.limit = limit
        self.per_client = per_client
        self.busy = 0
        self._by_client: Counter[str] = Counter()

    def try_take(self, client: str = "") -> Refused | None:
        """Take a place for ``client``; or why not."""
        if self.busy >= self.limit:
            return "busy"
        if self.per_client and self._by_client[client] >= self.per_client:
            return "client_share"
        self.busy += 1
        self._by_client[client] += 1
        return None

    def give(self, client: str = "") -> None:
        self.busy -= 1
        self._by_client[client] -= 1
        if self._by_client[client] <= 0:
            del self._by_client[client]  # not a counter of every address seen
