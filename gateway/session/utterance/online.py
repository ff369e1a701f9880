"""``online``: one streaming pass for the whole utterance (sans I/O).

The pool stream opens at the config; PCM is cut into chunks of exactly ``chunk_size[1]``
x 60 ms whatever the client's framing; at the end the remainder goes with the finish. Every
result with text is sent as it comes, then always the final one, with ``is_final``. (A
model that decodes each speech region again as it grows has its ``online`` utterance cut
into regions instead: ``two_pass``, without the offline pass.)
"""

from __future__ import annotations

from gateway.audio.chunker import ChunkCutter
from gateway.funasr.config import SessionConfig
from gateway.funasr.results import Partials
from gateway.session.utterance.actions import (
    Action,
    FinishStream,
    OpenStream,
    Pool,
    RelayResults,
    SendAudio,
    StreamRef,
)
from gateway.session.utterance.base import Utterance, UtteranceSettings


class Online(Utterance):
    def __init__(self, config: SessionConfig, settings: UtteranceSettings) -> None:
        super().__init__(config, settings)
        self._stream = StreamRef(Pool.STREAMING)
        self._cutter = ChunkCutter(config.chunk_bytes)

    def start(self) -> list[Action]:
        frames = Partials(
            "online",
            self.label,
            final=True,
            timing=self.config.timing,
            chunk_bytes=self.config.chunk_bytes,
        )
        return [
            OpenStream(self._stream, self.config.stream_options()),
            RelayResults((self._stream,), frames, last=True),
        ]

    def _audio(self, pcm: bytes) -> list[Action]:
        return [SendAudio(self._stream, chunk) for chunk in self._cutter.push(pcm)]

    def _end(self) -> list[Action]:
        return [FinishStream(self._stream, self._cutter.flush())]
