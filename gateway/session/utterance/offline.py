"""``offline``: the utterance held whole and decoded at its end (sans I/O).

The audio is held in the gateway (``HoldAudio``, against ASR_MAX_BUFFERED_SECONDS) until
the end, then decoded in one stream, as FunASR's offline server decodes it; longer than
ASR_MAX_SEGMENT_SECONDS, it is first cut at pauses (the ``FindSegments`` question) and
every segment is decoded in its own stream, all at once, for one result.

With ``spk``, the VAD's speech regions are asked for first (``FindSpeech``), and the whole
audio goes to a speaker stream with them, beside the decode: its turns label the result's
sentences (``WholeText``'s ``speakers``). The same regions cut the segments: one VAD pass.
Each of the config's known speakers' clips (``spk_refs``, decoded before the utterance
starts) goes to the speaker pool too, a stream of its own whose one region covers it, as a
file's references do: their voiceprints and the server's known speakers name the
utterance's speakers (``gateway.funasr.speaker_fields``). The clips' samples count against
ASR_MAX_BUFFERED_SECONDS from the end, where they go to the pool, with the audio held;
counted from the start, a config that switched the model before any audio would count them
again with each new utterance it starts.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.audio.segment import Segment, Speech
from gateway.funasr.config import SessionConfig
from gateway.funasr.known_speakers import Clip
from gateway.funasr.results import WholeText
from gateway.funasr.speaker_fields import SpeakerFields
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
from gateway.whole.speakers import reference_options
from shared.messages import StreamOptions


class Offline(Utterance):
    def __init__(
        self, config: SessionConfig, settings: UtteranceSettings, clips: Sequence[Clip] = ()
    ) -> None:
        super().__init__(config, settings)
        self._audio_held = bytearray()
        self._ended: bytearray | None = None  # the whole audio, while it is asked about
        self._speech: Speech | None = None  # spk's regions, once found
        self._clips = tuple(clips) if config.spk else ()  # only spk's speakers are named
        self._clip_bytes = sum(clip.samples.nbytes for clip in self._clips)

    def _audio(self, pcm: bytes) -> list[Action]:
        if not pcm:
            return []
        self._audio_held += pcm
        return [HoldAudio(len(pcm))]

    def _end(self) -> list[Action]:
        audio, self._audio_held = self._audio_held, bytearray()
        self._ended = audio
        if self.config.spk:
            held: list[Action] = [HoldAudio(self._clip_bytes)] if self._clip_bytes else []
            return [*held, FindSpeech(audio)]
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
        clips = tuple(StreamRef(Pool.SPEAKER) for _ in self._clips) if speaker else ()
        fields = None
        if speaker is not None:
            names = [clip.name for clip in self._clips]
            fields = SpeakerFields(names, self.settings.known_speakers)
        frames = WholeText(
            "offline",
            self.label,
            final=True,
            offsets_ms=[segment.start_ms for segment in segments],
            text_is_delta=self.settings.whole_text_is_delta,
            speakers=fields,
        )
        actions: list[Action] = [OpenStream(stream, options) for stream in streams]
        released = len(audio)
        if speaker is not None:
            assert self._speech is not None
            regions = self._speech.in_ms()
            actions.append(OpenStream(speaker, StreamOptions(speech_regions=regions)))
            actions += [
                OpenStream(ref, reference_options(len(clip.samples)))
                for ref, clip in zip(clips, self._clips, strict=True)
            ]
            # The speaker stream's one result comes after every segment's, then each clip's:
            # the writer reads the streams in order, and the frame is sent once all have
            # answered. The clips' streams run beside the others in the pool meanwhile.
            actions.append(RelayResults((*streams, speaker, *clips), frames, last=True))
            actions.append(FinishStream(speaker, memoryview(audio)))
            actions += [
                FinishStream(ref, clip.samples.data.cast("B"))
                for ref, clip in zip(clips, self._clips, strict=True)
            ]
            released += self._clip_bytes
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
        actions.append(ReleaseAudio(released))
        return actions
