"""``2pass``: the utterance as sentences, each with a streaming pass and an offline pass
(sans I/O). Where sentences end is the subclasses' (``two_pass_energy``, ``two_pass_vad``).

Every byte goes to exactly one sentence's streaming pass (``2pass-online`` frames, never
final) and is held for that sentence's offline pass. At the end of a sentence its
streaming pass is finished, its audio decoded whole (``2pass-offline``, whose text
replaces the sentence's partials; ``is_final`` only on the last sentence's), and the next
sentence's streaming pass starts afresh; its partials do not wait for the offline passes
before it (``gateway.funasr.two_pass_frames``: the order of the frames, and why FunASR's
clients still show every text once). The offline pass starts ASR_SENTENCE_PREROLL_MS
before the sentence's detected speech (all of it when none was detected), as FunASR's
2pass skips the silence before a sentence. The last sentence's offline pass is urgent (its
result is the final, which the client waits for); in a niced offline pool the earlier ones
run niced (``workers.pool.Urgency``; docs/workers.md, "Priorities").

The same sentences, without the offline pass, are the ``online`` mode of a model that
decodes each speech region again as it grows (``EngineCapabilities.regions``: streaming
SenseVoice): each region its own streaming pass, its frames ``online`` ones, the final
result of each region its whole decode, the last one's ``is_final``
(``gateway.funasr.running_text``). Nothing is held for a pass that does not come.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.audio.chunker import ChunkCutter
from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.funasr.config import SessionConfig
from gateway.funasr.results import Partials
from gateway.funasr.running_text import RunningText
from gateway.funasr.two_pass_frames import SentencePartials, SentenceText, ShownPartials
from gateway.session.utterance.actions import (
    Action,
    FinishStream,
    HoldAudio,
    OpenStream,
    Pool,
    RelayResults,
    ReleaseAudio,
    SendAudio,
    StreamRef,
)
from gateway.session.utterance.base import Utterance, UtteranceSettings
from shared.messages import SAMPLE_RATE, StreamOptions
from workers.pool import Urgency


class TwoPass(Utterance):
    """``offline_pass``: each sentence is decoded whole too (``2pass``); without it the
    sentences are an ``online`` utterance's regions."""

    def __init__(
        self, config: SessionConfig, settings: UtteranceSettings, *, offline_pass: bool = True
    ) -> None:
        super().__init__(config, settings)
        self.offline_pass = offline_pass
        self.sentence = bytearray()  # this sentence's audio so far, held for its offline pass
        self.sentence_length = 0  # its bytes, held or not
        self.sentence_origin = 0  # bytes of the utterance before this sentence
        self._streaming = StreamRef(Pool.STREAMING)
        self._cutter = ChunkCutter(config.chunk_bytes)
        self._sentences = 0  # begun so far
        self._shown = ShownPartials()
        self._regions = RunningText()  # without the offline pass: the online text
        # ``"spk": true``: each sentence's speaker, from the speaker pool's embeddings of
        # its windows, by the session's tracker.
        self._speakers = settings.speaker_tracker if config.spk and offline_pass else None
        self._region_frames: Partials | None = None

    def start(self) -> list[Action]:
        return self._open_streaming()

    def _open_streaming(self) -> list[Action]:
        """A streaming pass for the sentence starting now."""
        self._streaming = StreamRef(Pool.STREAMING)
        self._cutter = ChunkCutter(self.config.chunk_bytes)
        self._sentences += 1
        frames: Partials
        if self.offline_pass:
            frames = SentencePartials(
                self._shown,
                self._sentences,
                self.label,
                timing=self.config.timing,
                chunk_bytes=self.config.chunk_bytes,
                origin_bytes=self.sentence_origin,
                running=self.settings.streaming_regions,
            )
        else:
            frames = self._region_frames = Partials(
                "online",
                self.label,
                final=False,
                timing=self.config.timing,
                chunk_bytes=self.config.chunk_bytes,
                origin_bytes=self.sentence_origin,
                running=self._regions,
            )
        options = self.config.stream_options()
        if self.offline_pass and self.settings.streaming_regions:
            # The offline pass decodes the sentence whole: the streaming pass need not.
            options = replace(options, final_decode=False)
        return [
            OpenStream(self._streaming, options),
            RelayResults((self._streaming,), frames, last=False),
        ]

    def _take(self, pcm: bytes) -> list[Action]:
        """``pcm`` to this sentence's streaming pass, and held for its offline pass."""
        if not pcm:
            return []
        actions: list[Action] = [
            SendAudio(self._streaming, chunk) for chunk in self._cutter.push(pcm)
        ]
        self.sentence_length += len(pcm)
        if self.offline_pass:
            self.sentence += pcm
            actions.append(HoldAudio(len(pcm)))
        return actions

    def _end_sentence(self, *, last: bool, speech_start: int | None) -> list[Action]:
        """Finish this sentence's streaming pass, decode its audio whole, and, unless the
        utterance ended, start the next sentence's streaming pass.

        ``speech_start``: where the sentence's speech began, in bytes from its start (None:
        no speech was detected, so the offline pass decodes all of it)."""
        if not self.offline_pass:
            return self._end_region(last=last)
        actions: list[Action] = [FinishStream(self._streaming, self._cutter.flush())]
        self.sentence_length = 0
        sentence, self.sentence = self.sentence, bytearray()
        skip = 0
        if speech_start is not None:
            preroll = self.settings.endpoint.preroll_ms * SAMPLE_RATE // 1000 * 2
            skip = min(max(0, speech_start - preroll), len(sentence)) // 2 * 2
        offset_ms = (self.sentence_origin + skip) * 1000 // BYTES_PER_SECOND
        self.sentence_origin += len(sentence)
        offline = StreamRef(Pool.WHOLE)
        frames = SentenceText(
            self._shown,
            self._sentences,
            self.label,
            final=last,
            offset_ms=offset_ms,
            text_is_delta=self.settings.whole_text_is_delta,
            speakers=self._speakers,
            known=self.settings.known_speakers,
        )
        audio = memoryview(sentence)[skip:]
        streams: tuple[StreamRef, ...] = (offline,)
        speaker_actions: list[Action] = []
        duration_ms = len(audio) * 1000 // BYTES_PER_SECOND
        speech_ms = 0 if speech_start is None else (speech_start - skip) * 1000 // BYTES_PER_SECOND
        if self._speakers is not None and duration_ms > speech_ms:
            # The windows of its speech (as funasr embeds the VAD's regions: the pre-roll
            # before the detected speech is no one's voice), beside the offline pass.
            speaker = StreamRef(Pool.SPEAKER)
            regions = StreamOptions(
                speech_regions=((speech_ms, duration_ms),), window_embeddings=True
            )
            streams = (offline, speaker)
            speaker_actions = [OpenStream(speaker, regions), FinishStream(speaker, audio)]
        # The last sentence's result is the final, which the client waits for now; the
        # earlier ones' may come behind the partials (a niced offline pool's two classes).
        urgency = Urgency.URGENT if last else Urgency.BACKGROUND
        actions += [
            OpenStream(offline, self.config.stream_options(), urgency),
            *speaker_actions[:1],
            RelayResults(streams, frames, last=last),
            FinishStream(offline, audio),
            *speaker_actions[1:],
            ReleaseAudio(len(sentence)),
        ]
        if not last:
            actions += self._open_streaming()
        return actions

    def _end_region(self, *, last: bool) -> list[Action]:
        """An ``online`` region's end: its streaming pass finished (its final result is its
        whole decode), the next one begun; at the utterance's end, the pass that marks it
        (no stream of its own: the utterance is done once the last region's results are)."""
        actions: list[Action] = [FinishStream(self._streaming, self._cutter.flush())]
        self.sentence_origin += self.sentence_length
        self.sentence_length = 0
        if not last:
            return actions + self._open_streaming()
        self._regions.last_region = self._sentences
        assert self._region_frames is not None, "a region is open from the start"
        return [*actions, RelayResults((), self._region_frames, last=True)]
