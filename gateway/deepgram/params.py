"""The handshake's query parameters, read as Deepgram's live API reads them (sans I/O).

What we serve is taken; what Deepgram takes but we cannot honour is ignored (listed in
docs/deepgram.md), as Deepgram ignores a parameter it does not know; a value Deepgram would
refuse is refused here, before anything is spent, with Deepgram's error shape
(:class:`ListenRequestError`, a 400). The two exceptions are refused although Deepgram
takes them, because ignoring them would harm: ``redact`` (audio the client asked to have
redacted would come back as said) and more than one channel (we would decode the channels
mixed as one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.audio.pcm import MAX_AUDIO_FS, MIN_AUDIO_FS
from gateway.funasr.free_text import free_text_hotwords
from gateway.funasr.known_speakers import MAX_NAME_CHARS
from shared.messages import SAMPLE_RATE

Encoding = Literal["linear16", "mulaw", "alaw"]
ENCODINGS: tuple[Encoding, ...] = ("linear16", "mulaw", "alaw")
TELEPHONY_RATE = 8000  # G.711's: the rate mulaw and alaw mean where none is given
# The shortest pause that ends an utterance (speech_final): Deepgram's default, 10 ms, would
# cut one at every stop consonant, and each utterance is what the offline model decodes whole.
MIN_ENDPOINTING_MS = 300
DEFAULT_ENDPOINTING_MS = 10  # Deepgram's, taken up to MIN_ENDPOINTING_MS
MAX_ENDPOINTING_MS = 60_000
MIN_UTTERANCE_END_MS = 1000  # Deepgram's: its word timing ticks about once a second
MAX_UTTERANCE_END_MS = 5000
MAX_KNOWN_SPEAKERS = 64  # ``known_speaker`` names a stream may give
# Language codes as Deepgram writes them (en-US, zh-CN, zh-TW...) to SenseVoice's, by prefix.
_SPOKEN = {"en": "en", "zh": "zh", "yue": "yue", "ja": "ja", "ko": "ko"}


class ListenRequestError(ValueError):
    """A handshake Deepgram would refuse: HTTP 400 with ``err_code`` and ``err_msg``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class ListenParams:
    """What a ``/v1/listen`` session asked for, in our terms."""

    model: str | None = None  # the query's, if it names one of ours (else the default)
    language: str = "auto"  # SenseVoice's name for it; other models ignore it
    encoding: Encoding = "linear16"
    encoding_given: bool = False  # else raw linear16, or a WAV stream's own header
    sample_rate: int = SAMPLE_RATE
    interim_results: bool = False
    # The pause that ends an utterance, ms (None: endpointing=false, no pause ends one).
    endpointing_ms: int | None = MIN_ENDPOINTING_MS
    utterance_end_ms: int | None = None
    vad_events: bool = False
    punctuate: bool = False
    smart_format: bool = False  # our ITN (numerals=true asks for it too)
    # A speaker on each word: each sentence's live speaker, where the model has a speaker
    # pool and an offline model (2pass sentences); else accepted and none given.
    diarize: bool = False
    # Ours: the server's known speakers (ASR_SPEAKERS) by name whom diarize may name on
    # words (``speaker_name``); None: any of them. A URL carries no clips.
    known_speakers: tuple[str, ...] | None = None
    hotwords: tuple[str, ...] = ()  # keyterm and keywords, as words


def parse_params(query: Mapping[str, Sequence[str]], model_names: Sequence[str]) -> ListenParams:
    """The session's parameters from the query (each name to its values, in order);
    ``model_names``: the models we serve, by name."""

    def last(name: str) -> str | None:
        values = query.get(name)
        return values[-1] if values else None

    model = last("model")
    encoding_text = last("encoding")
    encoding: Encoding = "linear16"
    if encoding_text is not None:
        if encoding_text not in ENCODINGS:
            raise ListenRequestError(
                f"encoding={encoding_text[:40]!r} is not served: linear16, mulaw or alaw"
                " (raw audio; WAV needs no encoding)"
            )
        encoding = encoding_text
    default_rate = SAMPLE_RATE if encoding == "linear16" else TELEPHONY_RATE
    sample_rate = _integer(query, "sample_rate", default_rate, MIN_AUDIO_FS, MAX_AUDIO_FS)
    channels = _integer(query, "channels", 1, 1, 64)
    if channels != 1:
        raise ListenRequestError(f"channels={channels}: one channel is served (mono audio)")
    if any(value.strip().lower() != "false" for value in query.get("redact", ())):
        raise ListenRequestError(
            "redact is not served: nothing would be redacted from the transcripts"
        )
    interim_results = _flag(query, "interim_results", False)
    utterance_end_ms = None
    if last("utterance_end_ms") is not None:
        if not interim_results:
            raise ListenRequestError("utterance_end_ms needs interim_results=true")
        utterance_end_ms = _integer(
            query,
            "utterance_end_ms",
            MIN_UTTERANCE_END_MS,
            MIN_UTTERANCE_END_MS,
            MAX_UTTERANCE_END_MS,
        )
    return ListenParams(
        model=model if model in model_names else None,
        language=_spoken(last("language")),
        encoding=encoding,
        encoding_given=encoding_text is not None,
        sample_rate=sample_rate,
        interim_results=interim_results,
        endpointing_ms=_endpointing(last("endpointing")),
        utterance_end_ms=utterance_end_ms,
        vad_events=_flag(query, "vad_events", False),
        punctuate=_flag(query, "punctuate", False),
        smart_format=_flag(query, "smart_format", False) or _flag(query, "numerals", False),
        diarize=_flag(query, "diarize", False),
        hotwords=_hotwords(query),
        known_speakers=_known_speakers(query),
    )


def _flag(query: Mapping[str, Sequence[str]], name: str, default: bool) -> bool:
    values = query.get(name)
    if not values:
        return default
    value = values[-1].strip().lower()
    if value not in ("true", "false"):
        raise ListenRequestError(f"{name}={values[-1][:40]!r}: true or false")
    return value == "true"


def _integer(
    query: Mapping[str, Sequence[str]], name: str, default: int, low: int, high: int
) -> int:
    values = query.get(name)
    if not values:
        return default
    text = values[-1].strip()
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
        raise ListenRequestError(f"{name}={values[-1][:40]!r}: an integer from {low} to {high}")
    return int(text)


def _endpointing(value: str | None) -> int | None:
    """``endpointing``: ms of pause (at least :data:`MIN_ENDPOINTING_MS`), or ``false``."""
    if value is None:
        return max(DEFAULT_ENDPOINTING_MS, MIN_ENDPOINTING_MS)
    text = value.strip().lower()
    if text == "false":
        return None
    if text == "true":  # Deepgram's: endpointing on, at its default
        return max(DEFAULT_ENDPOINTING_MS, MIN_ENDPOINTING_MS)
    if not text.isascii() or not text.isdigit() or int(text) > MAX_ENDPOINTING_MS:
        raise ListenRequestError(
            f"endpointing={value[:40]!r}: milliseconds (0 to {MAX_ENDPOINTING_MS}), or false"
        )
    return max(int(text), MIN_ENDPOINTING_MS)


def _spoken(language: str | None) -> str:
    """SenseVoice's language for Deepgram's code (``en-US``: ``en``); ``auto`` for
    ``multi``, none, or one it does not know."""
    if not language:
        return "auto"
    return _SPOKEN.get(language.lower().split("-")[0], "auto")


def _hotwords(query: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """``keyterm`` (Nova-3's terms, each a word or phrase) and ``keywords`` (``word`` or
    ``word:boost``) as hotwords: the words that fit our rules; the boosts are dropped, as
    SeACo-Paraformer takes words only."""
    keywords = [keyword.rpartition(":")[0] or keyword for keyword in query.get("keywords", ())]
    return free_text_hotwords(None, [*query.get("keyterm", ()), *keywords])


def _known_speakers(query: Mapping[str, Sequence[str]]) -> tuple[str, ...] | None:
    """``known_speaker`` (ours, repeatable): the server's known speakers this stream may
    name, at most MAX_KNOWN_SPEAKERS, each a name of at most MAX_NAME_CHARS (an unknown
    name names no one)."""
    names = query.get("known_speaker")
    if names is None:
        return None
    if len(names) > MAX_KNOWN_SPEAKERS or any(len(name) > MAX_NAME_CHARS for name in names):
        raise ListenRequestError(
            f"known_speaker: at most {MAX_KNOWN_SPEAKERS} names of {MAX_NAME_CHARS} characters"
        )
    return tuple(name.strip() for name in names)
