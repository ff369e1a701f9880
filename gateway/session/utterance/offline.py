"""``offline``: the utterance held whole and decoded at its end (sans I/O).

The audio is held in the gateway (``HoldAudio``, against ASR_MAX_BUFFERED_SECONDS) until
the end, then decoded in one stream, as FunASR's offline server decodes it; longer than
ASR_MAX_SEGMENT_SECONDS, it is first cut at pauses (the ``FindSegments`` question) and
every segment is decoded in its own stream, all at once, for one result.

With ``spk``, the VAD's speech regions are asked for first (``FindSpeech``), and the whole
audio goes to a speaker stream with them, beside the decode: its turns label the result's
sentences (``WholeText``'s ``speakers``). The same regions cut the segments: one VAD pass.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.audio.segment import Segment, Speech
from gateway.funasr.config import SessionConfig
from gateway.funasr.results import WholeText
from gateway.session.utterance.actions import (
    Action,
    FindSegments,
    FindSpeech,
    FinishStream,
    HoldAudio,
    OpenStream,
    Pool,
    RelayResults,
    ReleaseAudio,
    StreamRef,
)
from gateway.session.utterance.base import Utterance, UtteranceSettings
from shared.messages import StreamOptions


class Offline(Utterance):
    def __init__(self, config: SessionConfig, settings: UtteranceSettings) -> None:
        super().__init__(config, settings)
        self._audio_held = bytearray()
        self._ended: bytearray | None = None  # the whole audio, while it is asked about
        self._speech: Speech | None = None  # spk's regions, once found

    def _audio(self, pcm: bytes) -> list[Action]:
        if not pcm:
            return []
        self._audio_held += pcm
        return [HoldAudio(len(pcm))]

    def _end(self) -> list[Action]:
        audio, self._audio_held = self._audio_held, bytearray()
        self._ended = audio
        if self.config.spk:
            return [FindSpeech(audio)]
        return self._segment()

    def speech_found(self, speech: Speech) -> list[Action]:
        self._speech = speech
        return self._segment()

    def _segment(self) -> list[Action]:
        audio = self._ended
        assert audio is not None, "asked at the end"
        if len(audio) <= self.settings.max_segment_bytes:
            self._ended = None
            return self._decode(audio, [Segment(0, len(audio))])
        return [FindSegments(audio, self._speech)]  # one VAD pass: spk's, if it was asked

    def segments_found(self, segments: Sequence[Segment]) -> list[Action]:
        audio, self._ended = self._ended, None
        assert audio is not None, "segments answer the FindSegments of the end"
        return self._decode(audio, segments)

    def _decode(self, audio: bytearray, segments: Sequence[Segment]) -> list[Action]:
        streams = tuple(StreamRef(Pool.WHOLE) for _ in segments)
        options = self.config.stream_options()
        speaker = StreamRef(Pool.SPEAKER) if self._speech is not None else None
        frames = WholeText(
            "offline",
            self.label,
            final=True,
            offsets_ms=[segment.start_ms for segment in segments],
            text_is_delta=self.settings.whole_text_is_delta,
            speakers=speaker is not None,
        )
        actions: list[Action] = [OpenStream(stream, options) for stream in streams]
        if speaker is not None:
            assert self._speech is not None
            regions = self._speech.in_ms()
            actions.append(OpenStream(speaker, StreamOptions(speech_regions=regions)))
            # The speaker stream's one result comes after every segment's: the writer reads
            # the streams in order, and the frame is sent once all have answered.
            actions.append(RelayResults((*streams, speaker), frames, last=True))
            actions.append(FinishStream(speaker, memoryview(audio)))
        else:
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
