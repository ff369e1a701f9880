"""A client of the gateway (and of any FunASR WebSocket server): ``transcribe`` streams PCM
and returns the transcript, resuming a dropped session when asked (``resume``: its
bookkeeping, sans I/O); ``python -m gateway.client`` is the command line (``cli``)."""

from gateway.client.stream import (
    DEFAULT_URL,
    Message,
    ServerError,
    Transcript,
    read_wav,
    transcribe,
)

__all__ = ["DEFAULT_URL", "Message", "ServerError", "Transcript", "read_wav", "transcribe"]
