"""``offline``: the utterance held whole and decoded at its end (sans I/O).

The audio is held in the gateway (``HoldAudio``, against ASR_MAX_BUFFERED_SECONDS) until
the end, then decoded in one stream, as FunASR's offline server decodes it; longer than
ASR_MAX_SEGMENT_SECONDS, it is first cut at pauses (the ``FindSegments`` question) and
every segment is decoded in its own stream, all at once, for one result.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.audio.segment import Segment
from gateway.funasr.config import SessionConfig
from gateway.funasr.results import WholeText
from gateway.session.utterance.actions import (
    Action,
    FindSegments,
    FinishStream,
    HoldAudio,
    OpenStream,
    Pool,
    RelayResults,
    ReleaseAudio,
    StreamRef,
)
from gateway.session.utterance.base import Utterance, UtteranceSettings


class Offline(Utterance):
    def __init__(self, config: SessionConfig, settings: UtteranceSettings) -> None:
        super().__init__(config, settings)
        self._audio_held = bytearray()
        self._ended: bytearray | None = None  # the whole audio, while its segments are found

    def _audio(self, pcm: bytes) -> list[Action]:
        if not pcm:
            return []
        self._audio_held += pcm
        return [HoldAudio(len(pcm))]

    def _end(self) -> list[Action]:
        audio, self._audio_held = self._audio_held, bytearray()
        if len(audio) <= self.settings.max_segment_bytes:
            return self._decode(audio, [Segment(0, len(audio))])
        self._ended = audio
        return [FindSegments(audio)]

    def segments_found(self, segments: Sequence[Segment]) -> list[Action]:
        audio, self._ended = self._ended, None
        assert audio is not None, "segments answer the FindSegments of the end"
        return self._decode(audio, segments)

    def _decode(self, audio: bytearray, segments: Sequence[Segment]) -> list[Action]:
        streams = tuple(StreamRef(Pool.WHOLE) for _ in segments)
        options = self.config.stream_options()
        frames = WholeText(
            "offline",
            self.label,
            final=True,
            offsets_ms=[segment.start_ms for segment in segments],
            text_is_delta=self.settings.whole_text_is_delta,
        )
        actions: list[Action] = [OpenStream(stream, options) for stream in streams]
        actions.append(RelayResults(streams, frames, last=True))
        if len(segments) == 1:
            actions.append(FinishStream(streams[0], audio))
        else:
            whole = memoryview(audio)
            actions += [
                FinishStream(stream, whole[segment.start : segment.end])
                for stream, segment in zip(streams, segments, strict=True)
            ]
        actions.append(ReleaseAudio(len(audio)))
        return actions
