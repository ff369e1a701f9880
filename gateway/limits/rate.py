"""How many frames a session may send: a token bucket, sans-I/O (the caller passes the time).

A frame costs the gateway's event loop about the same whatever it carries (uvicorn parses
it, queues it, the session reads it), while the workers' backpressure only paces the bytes
of audio. A flood of tiny frames is therefore never slowed down by anything but this cap.
So a frame costs tokens by how little audio it carries: a frame of a few bytes costs a
whole token, one with ``FULL_FRAME_BYTES`` of audio or more costs nothing (its bytes are
paced by the workers, as a fast upload in 60 ms frames is). Text is parsed as JSON, which
costs by its length: a text frame costs a token per ``TEXT_CHARS_PER_TOKEN`` characters,
at least one, so that frames at ``ASR_MAX_TEXT_BYTES`` come a few a second, not 200 (eight
sessions sending 64 KiB frames took other sessions' chunk latency from 3 to 340 ms p50).
"""

from __future__ import annotations

FULL_FRAME_BYTES = 640  # 20 ms of 16 kHz int16 audio: frames of this much are free
TEXT_CHARS_PER_TOKEN = 1024  # a config is a few hundred: one token


def text_cost(chars: int) -> float:
    """The tokens a text frame (or event) of ``chars`` characters costs."""
    return max(1.0, chars / TEXT_CHARS_PER_TOKEN)


def frame_cost(audio_bytes: int | None) -> float:
    """The tokens one frame costs: a text frame (``None``) 1 (``text_cost`` by its length); a
    binary frame of ``audio_bytes``
    (counted at 16 kHz) 1 less its share of ``FULL_FRAME_BYTES``, never below 0."""
    if audio_bytes is None:
        return 1.0
    return max(0.0, 1.0 - audio_bytes / FULL_FRAME_BYTES)


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` of them saved up; it starts full.

    ``take(cost, now)`` spends ``cost`` tokens and says True, or says False and spends
    nothing when there are not that many. ``now`` is any monotonic clock, in seconds.
    """

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if not rate > 0:
            raise ValueError("the rate must be positive")
        if not burst >= 1:
            raise ValueError("the burst must be at least 1")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._stamp = now

    @property
    def tokens(self) -> float:
        """The tokens left at the last ``take``."""
        return self._tokens

    def take(self, cost: float, now: float) -> bool:
        elapsed = max(0.0, now - self._stamp)
        self._stamp = max(self._stamp, now)
        self._tokens = min(self.burst, self._tokens + elapsed * self.rate)
        if self._tokens < cost:
            return False
        self._tokens -= cost
        return True
