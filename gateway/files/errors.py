"""The refusal of a ``POST /v1/transcribe`` request: an HTTP status, a reason, a message."""

from __future__ import annotations


class TranscribeError(Exception):
    """A refusal: its HTTP status, a short ``reason`` slug for the metrics
    (``asr_transcription_refusals_total{reason}``) and a message for the client."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def too_large(
    limit: int, what: str = "the audio", why: str = "ASR_TRANSCRIBE_MAX_BYTES"
) -> TranscribeError:
    return TranscribeError(413, "too_large", f"{what} is larger than {limit} bytes ({why})")
