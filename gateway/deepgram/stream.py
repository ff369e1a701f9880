"""A ``/v1/listen`` stream's audio and control messages as a FunASR session's frames (sans I/O;
the way back is ``gateway.deepgram.results``).

Deepgram's stream is one run of audio; the FunASR session behind takes utterances. Each
utterance is one of Deepgram's speech turns, named by ``wav_name``: a config opens it at its
first audio, its audio goes as 16 kHz PCM frames, ``{"is_speaking": false}`` ends it. One
ends

- where our energy endpointer (``gateway.audio.endpointer``) hears ``endpointing`` ms of
  pause after speech: its final result is ``speech_final``; the audio is cut exactly there,
  and the resampler goes on into the next one;
- at ``ASR_MAX_SEGMENT_SECONDS`` without such a pause (``is_final``, not ``speech_final``);
- at ``Finalize`` (its final result says ``from_finalize``) and ``CloseStream``: what the
  resampler holds goes with it.

Audio arrives as ``linear16``, ``mulaw`` or ``alaw`` at the query's ``sample_rate``, or, with
no ``encoding``, as raw ``linear16`` or a WAV stream whose header says its rate (any other
container is refused: it would decode as noise). It is resampled to 16 kHz as the other
dialects' audio is (``gateway.audio.resample``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Literal

from gateway.audio.endpointer import EndpointSettings, EnergyEndpointer
from gateway.audio.g711 import PcmDecoder
from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.audio.resample import PcmResampler
from gateway.audio.wav_header import WavHeaderError, read_wav_header
from gateway.deepgram.params import ListenParams
from gateway.funasr.free_text import free_text_hotwords
from shared.messages import SAMPLE_RATE

END_FRAME = json.dumps({"is_speaking": False})
Ending = Literal["pause", "length", "finalize", "close"]
_ENCODINGS = {"linear16": "pcm16", "mulaw": "pcmu", "alaw": "pcma"}
# The first bytes of containers we do not decode (WAV's "RIFF" is read: read_wav_header).
_CONTAINERS = {b"OggS": "Ogg", b"fLaC": "FLAC", b"ID3": "MP3", b"\x1aE\xdf\xa3": "WebM"}


class ListenAudioError(ValueError):
    """Audio the stream cannot decode: the session closes (Deepgram's DATA-0000)."""


@dataclass(frozen=True, slots=True)
class ToSession:
    """A FunASR frame for the session behind: text (a config, an end) or PCM."""

    text: str | None = None
    data: bytes | None = None


@dataclass(slots=True)
class Utterance:
    """One utterance of the session, from its config until its final result."""

    wav_name: str
    origin: int  # 16 kHz bytes of the stream before it
    size: int = 0
    ending: Ending | None = None  # why it ended; None while it takes audio
    speech_start: int | None = None  # bytes into it where the endpointer heard speech

    @property
    def start_s(self) -> float:
        return self.origin / BYTES_PER_SECOND

    @property
    def end_s(self) -> float:
        return (self.origin + self.size) / BYTES_PER_SECOND


@dataclass(slots=True)
class StreamAudio:
    """What the client sent, for the closing ``Metadata``."""

    digest: hashlib._Hash = field(default_factory=hashlib.sha256)  # of the bytes as sent
    bytes_16k: int = 0  # the audio, resampled: its duration


class ListenStream:
    """Deepgram's audio and control messages in, the FunASR session's frames out."""

    def __init__(
        self,
        params: ListenParams,
        *,
        mode: Literal["online", "2pass"],
        model: str | None,
        endpoint: EndpointSettings,
        max_utterance_bytes: int,
        max_frame_bytes: int,
        speakers: bool = False,
    ) -> None:
        self.params = params
        # ``diarize``, where the model has a speaker pool and 2pass sentences: each
        # sentence's live speaker on its words.
        self._speakers = speakers and params.diarize and mode == "2pass"
        self.audio = StreamAudio()
        self.utterances: dict[str, Utterance] = {}  # until their final results
        self.speech_started: list[float] = []  # the SpeechStarted events found, in seconds
        self._mode = mode
        self._model = model
        self._endpoint = endpoint
        self._max_utterance_bytes = max_utterance_bytes
        self._max_frame_bytes = max_frame_bytes
        self._header = not params.encoding_given  # a WAV header may come first
        self._decoder = PcmDecoder(_ENCODINGS[params.encoding])  # type: ignore[arg-type]
        self._rate = params.sample_rate
        self._resampler = self._new_resampler()
        self._endpointer = self._new_endpointer()
        self._count = 0
        self._position = 0  # 16 kHz bytes of the stream before the current utterance
        self._current: Utterance | None = None

    @property
    def rate(self) -> int:
        """The sample rate of the audio as sent (a WAV header's, once read)."""
        return self._rate

    def sixteen_k_bytes(self, sent: int) -> int:
        """About how many bytes of 16 kHz PCM ``sent`` bytes of the stream's audio are."""
        per_sample = 2 if self.params.encoding == "linear16" else 1
        return sent // per_sample * 2 * SAMPLE_RATE // self._rate

    def sent_bytes(self, seconds: float) -> int:
        """Bytes of the stream's audio, as sent, in ``seconds`` (whole samples)."""
        per_sample = 2 if self.params.encoding == "linear16" else 1
        return int(seconds * self._rate) * per_sample

    @property
    def position_s(self) -> float:
        """Seconds of audio taken so far."""
        return self.audio.bytes_16k / BYTES_PER_SECOND

    # -- the client's messages ------------------------------------------------------------

    def start(self) -> list[ToSession]:
        """The first utterance, at once: the session's ASR_CONFIG_TIMEOUT never runs out on
        a client that waits to speak (ASR_FIRST_AUDIO_TIMEOUT applies instead); later ones
        open with their first audio."""
        return self._open()

    def configure(self, keyterms: tuple[str, ...] | None) -> list[ToSession]:
        """``Configure``: the hotwords from now on (``None``: as they are); the open
        utterance takes them at once, as FunASR's hotwords may change mid-utterance."""
        if keyterms is None:
            return []
        self.params = replace(self.params, hotwords=free_text_hotwords(None, keyterms))
        if self._current is None:
            return []
        return [ToSession(text=json.dumps({"hotwords": " ".join(self.params.hotwords)}))]

    def take_audio(self, audio: bytes) -> list[ToSession]:
        self.audio.digest.update(audio)
        if self._header:
            audio = self._skip_header(audio)
        pcm = self._decoder.decode(audio)
        if self._resampler is not None:
            pcm = self._resampler.push(pcm)
        return self._take(pcm)

    def finalize(self, ending: Ending = "finalize") -> list[ToSession]:
        """The audio so far decoded now: what the resampler holds, then the utterance's
        end. ``None`` open: nothing to end (the caller answers the Finalize itself)."""
        outputs: list[ToSession] = []
        if self._resampler is not None:
            outputs += self._take(self._resampler.flush())
            self._resampler = self._new_resampler()
        self._endpointer = self._new_endpointer()
        if self._current is not None:
            outputs += self._end(ending)
        return outputs

    @property
    def open(self) -> bool:
        """An utterance is taking audio (a Finalize would end it)."""
        return self._current is not None

    # -- audio into utterances ------------------------------------------------------------

    def _take(self, pcm: bytes) -> list[ToSession]:
        if not pcm:
            return []
        self.audio.bytes_16k += len(pcm)
        outputs: list[ToSession] = []
        start = 0
        for end in self._endpointer.push(pcm):
            current = self._current
            sent = current.size if current is not None else 0
            outputs += self._send(pcm[start : start + end.offset - sent])
            start += end.offset - sent
            self._announce(end.speech_start)
            outputs += self._end("pause" if end.speech_start is not None else "length")
        outputs += self._send(pcm[start:])
        self._announce(self._endpointer.speech_start)
        return outputs

    def _send(self, pcm: bytes) -> list[ToSession]:
        if not pcm:
            return []
        outputs = [] if self._current is not None else self._open()
        assert self._current is not None
        self._current.size += len(pcm)
        step = self._max_frame_bytes // 2 * 2
        return outputs + [ToSession(data=pcm[at : at + step]) for at in range(0, len(pcm), step)]

    def _announce(self, speech_start: int | None) -> None:
        current = self._current
        if speech_start is None or current is None or current.speech_start is not None:
            return
        current.speech_start = speech_start
        self.speech_started.append((current.origin + speech_start) / BYTES_PER_SECOND)

    def _open(self) -> list[ToSession]:
        self._count += 1
        current = Utterance(f"u{self._count}", self._position)
        self._current = current
        self.utterances[current.wav_name] = current
        params = self.params
        config: dict[str, object] = {
            "mode": self._mode,
            "wav_name": current.wav_name,
            "audio_fs": SAMPLE_RATE,  # resampled here
            "chunk_size": [5, 10, 5],  # FunASR's clients' 600 ms chunks
            "chunk_interval": 10,
            "hotwords": " ".join(params.hotwords),
            "itn": params.smart_format,
            "svs_lang": params.language,
            "svs_itn": params.smart_format or params.punctuate,
            # Each chunk's result says where its audio ends (audio_end_ms): what an interim
            # covers, and how far decoding has gone (UtteranceEnd waits on that, not on
            # the audio taken).
            "timing": True,
            "is_speaking": True,
        }
        if self._speakers:
            config["spk"] = True
        if self._model is not None:
            config["model"] = self._model
        return [ToSession(text=json.dumps(config, ensure_ascii=False))]

    def _end(self, ending: Ending) -> list[ToSession]:
        current = self._current
        if current is None:
            return []
        current.ending = ending
        self._position += current.size
        self._current = None
        return [ToSession(text=END_FRAME)]

    # -- helpers --------------------------------------------------------------------------

    def _skip_header(self, audio: bytes) -> bytes:
        """The stream's first bytes: a WAV header sets the rate and is skipped; another
        container is refused; anything else is raw linear16."""
        self._header = False
        for magic, name in _CONTAINERS.items():
            if audio.startswith(magic):
                raise ListenAudioError(
                    f"{name} audio is not decoded: send raw audio with encoding=linear16,"
                    " mulaw or alaw and its sample_rate, or WAV"
                )
        if not audio.startswith(b"RIFF"):
            return audio
        try:
            header = read_wav_header(audio)
        except WavHeaderError as error:
            raise ListenAudioError(f"the WAV header: {error}") from None
        if header.rate != self._rate:
            self._rate = header.rate
            self._resampler = self._new_resampler()
        return audio[header.data_offset :]

    def _new_resampler(self) -> PcmResampler | None:
        return None if self._rate == SAMPLE_RATE else PcmResampler(self._rate)

    def _new_endpointer(self) -> EnergyEndpointer:
        pause = self.params.endpointing_ms
        settings = EndpointSettings(
            # endpointing=false: no pause ends an utterance, only its length.
            silence_ms=pause if pause is not None else self._max_utterance_bytes,
            min_speech_ms=self._endpoint.min_speech_ms,
            energy_dbfs=self._endpoint.energy_dbfs,
            preroll_ms=self._endpoint.preroll_ms,
        )
        return EnergyEndpointer(settings, self._max_utterance_bytes)
