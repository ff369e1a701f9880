"""A file's transcript in OpenAI's response formats (sans I/O): ``json``, ``text``, ``srt``,
``vtt``, ``verbose_json``, and the streamed events of ``stream=true``.

A file comes as its decoded segments (``gateway.whole.long_audio``: cut at pauses, each at most
``ASR_MAX_SEGMENT_SECONDS``; a short file is one). Where the model gives sentences (token
times: a BiCifParaformer or SeACo-Paraformer; split at a punctuation model's marks), each
sentence becomes a subtitle cue and a ``verbose_json`` segment, timed by its first token's
start and last token's end (``stamp_sents``' start and end); else each decoded segment
does, timed by its token times where the model gives them, else by its bounds in the file.
A segment whose text is empty (silence) becomes none, as its text is left out of the
joined one. A cue's text is its sentence as the final text writes it (``sentence_texts``).

``verbose_json`` follows the SDK's ``TranscriptionVerbose``, ``TranscriptionSegment`` and
``TranscriptionWord`` field by field. What a Paraformer cannot tell truthfully is filled
with neutral values, so that code written for Whisper's output reads it as a good segment:

=================== ==========================================================================
field               here
=================== ==========================================================================
``language``        the language the model heard (SenseVoice), else the request's as
                    given, else ``""`` (a Paraformer detects none)
``segments[].seek`` where the decoded segment it is in starts, in 10 ms frames: Whisper's
                    ``seek``, the start of the window it was decoded in, in its unit
``tokens``          ``[]``: the worker does not send token ids
``temperature``     ``0.0``: Paraformer is non-autoregressive, nothing is sampled
``avg_logprob``     ``0.0`` (neutral; Whisper's "failed" is below -1): no scores are sent
``compression_ratio`` computed as Whisper does: the text's UTF-8 length over its zlib length
``no_speech_prob``  ``0.0`` (neutral): a segment with no text is left out instead
``words``           only when ``word`` is asked; from the token times: empty without them
=================== ==========================================================================

``usage`` is ``{"type": "duration", "seconds": N}``: the audio's length in whole seconds,
rounded up, as OpenAI bills audio.
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Literal

from gateway.funasr.speaker_labels import sentence_speakers
from shared.messages import SentenceStamp, SpeakerTurn

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt", "diarized_json"]
RESPONSE_FORMATS: tuple[ResponseFormat, ...] = (
    "json",
    "text",
    "srt",
    "verbose_json",
    "vtt",
    "diarized_json",
)
Granularity = Literal["segment", "word"]
GRANULARITIES: tuple[Granularity, ...] = ("segment", "word")
JSON_MEDIA_TYPE = "application/json"
TEXT_MEDIA_TYPE = "text/plain; charset=utf-8"
VTT_MEDIA_TYPE = "text/vtt; charset=utf-8"

# A token of FunASR's text, as its timestamps count them: one CJK character, or a run of
# other word characters (an English word: funasr merges its BPE pieces' times). Punctuation
# (a punctuation model's) has no time and is no token.
_CJK = "\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(f"[{_CJK}]|(?:(?![{_CJK}])[\\w'\u2019])+")
# The marks a sentence ends at: those the offline worker splits after
# (``workers.engines.sentences.PUNCTUATION``; a test holds them equal: the gateway does not
# import the workers' engines): the full-width comma, full stop, question mark and
# enumeration comma; English , . ?
PUNCTUATION = frozenset("\uff0c\u3002\uff1f\u3001,.?")
# An English word of a sentence's ``text_seg``, as the worker's split counts one.
_WORD = re.compile(r"[A-Za-z0-9']+")


@dataclass(frozen=True, slots=True)
class Cue:
    """One subtitle cue and one ``verbose_json`` segment, in ms from the file's start;
    ``seek_ms``: where the decoded segment it is in starts."""

    start_ms: int
    end_ms: int
    text: str
    seek_ms: int


@dataclass(frozen=True, slots=True)
class TimedSegment:
    """A decoded segment: its bounds in the file, its token times and its sentences
    (``stamp_sents``' times: moved to the file's start), in ms."""

    start_ms: int
    end_ms: int
    text: str
    token_times: tuple[tuple[int, int], ...] = ()
    sentences: tuple[SentenceStamp, ...] = ()

    @property
    def cue_ms(self) -> tuple[int, int]:
        """Where its cue starts and ends: from the token times where there are any."""
        if self.token_times:
            return self.token_times[0][0], self.token_times[-1][1]
        return self.start_ms, self.end_ms

    @property
    def cues(self) -> tuple[Cue, ...]:
        """A cue per sentence where the model gives sentences, else one for it all."""
        if not self.sentences:
            start, end = self.cue_ms
            return (Cue(start, end, self.text, self.start_ms),)
        texts = sentence_texts(self.text, self.sentences)
        return tuple(
            Cue(sentence.start, sentence.end, text, self.start_ms)
            for sentence, text in zip(self.sentences, texts, strict=True)
        )


@dataclass(frozen=True, slots=True)
class FileTranscript:
    text: str  # the segments' texts joined as FunASR joins them
    duration_s: float
    language: str
    segments: tuple[TimedSegment, ...]
    # Who spoke when, where the request asked (``speakers``): each segment's ``speaker``.
    speaker_turns: tuple[SpeakerTurn, ...] | None = None
    # The speakers a known speaker names (``diarized_json``), by label.
    speaker_names: Mapping[int, str] = field(default_factory=dict)

    @property
    def spoken(self) -> tuple[TimedSegment, ...]:
        """The segments with text: those that have cues."""
        return tuple(segment for segment in self.segments if segment.text)

    @property
    def cues(self) -> tuple[Cue, ...]:
        """Every cue, in order: the subtitles, and ``verbose_json``'s segments."""
        return tuple(cue for segment in self.spoken for cue in segment.cues)


@dataclass(frozen=True, slots=True)
class Rendered:
    body: str
    media_type: str


def usage(duration_s: float) -> dict[str, object]:
    return {"type": "duration", "seconds": math.ceil(duration_s)}


def render(
    transcript: FileTranscript,
    response_format: ResponseFormat,
    granularities: Sequence[Granularity] = ("segment",),
) -> Rendered:
    """The response body in ``response_format``; ``granularities`` count for
    ``verbose_json`` only."""
    match response_format:
        case "json":
            body = {"text": transcript.text, "usage": usage(transcript.duration_s)}
            return Rendered(_json(body), JSON_MEDIA_TYPE)
        case "text":
            return Rendered(transcript.text + "\n", TEXT_MEDIA_TYPE)
        case "srt":
            return Rendered(srt(transcript), TEXT_MEDIA_TYPE)
        case "vtt":
            return Rendered(vtt(transcript), VTT_MEDIA_TYPE)
        case "verbose_json":
            return Rendered(_json(verbose_json(transcript, granularities)), JSON_MEDIA_TYPE)
        case "diarized_json":
            return Rendered(_json(diarized_json(transcript)), JSON_MEDIA_TYPE)


def timecode(ms: int, separator: str) -> str:
    """``HH:MM:SS,mmm`` (SRT: ``separator=","``) or ``HH:MM:SS.mmm`` (WebVTT)."""
    seconds, millis = divmod(max(ms, 0), 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{millis:03d}"


def srt(transcript: FileTranscript) -> str:
    cues = []
    for number, cue in enumerate(transcript.cues, start=1):
        start, end = timecode(cue.start_ms, ","), timecode(cue.end_ms, ",")
        cues.append(f"{number}\n{start} --> {end}\n{cue.text}\n\n")
    return "".join(cues)


def vtt(transcript: FileTranscript) -> str:
    cues = ["WEBVTT\n\n"]
    for cue in transcript.cues:
        start, end = timecode(cue.start_ms, "."), timecode(cue.end_ms, ".")
        cues.append(f"{start} --> {end}\n{cue.text}\n\n")
    return "".join(cues)


def verbose_json(
    transcript: FileTranscript, granularities: Sequence[Granularity] = ("segment",)
) -> dict[str, object]:
    """OpenAI's ``TranscriptionVerbose``; ``segments`` always (as Whisper gives them without
    being asked), ``words`` when ``word`` is asked."""
    body: dict[str, object] = {
        "task": "transcribe",
        "language": transcript.language,
        "duration": transcript.duration_s,
        "text": transcript.text,
        "segments": [_segment(index, cue) for index, cue in enumerate(transcript.cues)],
    }
    if transcript.speaker_turns is not None:  # as funasr-server's verbose_json has them
        cues = transcript.cues
        spans = [(cue.start_ms, cue.end_ms) for cue in cues]
        speakers = sentence_speakers(spans, transcript.speaker_turns)
        for segment, speaker in zip(body["segments"], speakers, strict=True):  # type: ignore[call-overload]
            segment["speaker"] = speaker
    if "word" in granularities:
        body["words"] = [
            {"word": word, "start": start / 1000, "end": end / 1000}
            for segment in transcript.spoken
            for word, (start, end) in words_of(segment)
        ]
    body["usage"] = usage(transcript.duration_s)
    return body


def diarized_json(transcript: FileTranscript) -> dict[str, object]:
    """OpenAI's ``TranscriptionDiarized`` (``gpt-4o-transcribe-diarize``): a segment per
    sentence (cue), each with its speaker: a known speaker's name, else a letter as OpenAI
    gives a speaker it does not know, capital letters in the order they first speak (A, B,
    ... Z, AA ...). A speaker keeps its letter whether the others are named or not."""
    cues = transcript.cues
    turns = transcript.speaker_turns or ()
    speakers = sentence_speakers([(cue.start_ms, cue.end_ms) for cue in cues], turns)
    letters: dict[int, str] = {}
    segments = []
    for index, (cue, speaker) in enumerate(zip(cues, speakers, strict=True)):
        letter = letters.setdefault(speaker, speaker_letter(len(letters)))
        segments.append(
            {
                "type": "transcript.text.segment",
                "id": f"seg_{index}",
                "start": cue.start_ms / 1000,
                "end": cue.end_ms / 1000,
                "text": cue.text,
                "speaker": transcript.speaker_names.get(speaker, letter),
            }
        )
    return {
        "task": "transcribe",
        "duration": transcript.duration_s,
        "text": transcript.text,
        "segments": segments,
        "usage": usage(transcript.duration_s),
    }


def speaker_letter(order: int) -> str:
    """The ``order``-th speaker's letters: A ... Z, then AA, AB ... (as spreadsheets)."""
    letters = ""
    order += 1
    while order:
        order, rest = divmod(order - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def words_of(segment: TimedSegment) -> list[tuple[str, tuple[int, int]]]:
    """The segment's words paired with their token times: CJK characters one by one,
    other words whole, punctuation (which has no time) left out. Empty when the model gives
    no times, or when the count does not match (no word is given a neighbour's time)."""
    if not segment.token_times:
        return []
    tokens = _TOKEN.findall(segment.text)
    if len(tokens) != len(segment.token_times):
        return []
    return list(zip(tokens, segment.token_times, strict=True))


def sentence_texts(text: str, sentences: Sequence[SentenceStamp]) -> tuple[str, ...]:
    """Each sentence's text as ``text`` (the final text of the decoded segment they are
    of) writes it: ``text`` cut after each of its punctuation marks, where those marks are
    the sentences' own, in order; so the cues read as the ``text`` of the answer does,
    ITN's numbers and all, and joined they are that text. ``text_seg`` is not that text:
    its tokens are spaced, and taken before ITN.

    Where the marks differ (ITN wrote one: "三点五" as "3.5"; two marks in a row, of which
    the split kept one), the sentences' own tokens instead, joined as the model's text
    joins them (a space between two English words only) with their mark: the text before
    ITN, rather than a cut in the wrong place."""
    pieces = _cut_at_marks(text, [sentence.punc for sentence in sentences])
    if pieces is not None:
        return pieces
    return tuple(_joined(sentence) for sentence in sentences)


def _cut_at_marks(text: str, puncs: Sequence[str]) -> tuple[str, ...] | None:
    """``text`` cut after each mark, when its marks are ``puncs`` (the last sentence's may
    be "": it runs to the end); None where they are not, or a piece would be empty."""
    ends = [index + 1 for index, char in enumerate(text) if char in PUNCTUATION]
    marks = [text[end - 1] for end in ends]
    open_end = bool(puncs) and not puncs[-1]
    if marks != list(puncs[:-1] if open_end else puncs):
        return None
    bounds = [0, *ends, len(text)] if open_end else [0, *ends]
    if not open_end and text[bounds[-1] :].strip():
        return None  # text after the last sentence's mark: not these sentences
    pieces = tuple(text[start:end].strip() for start, end in pairwise(bounds))
    return pieces if all(pieces) else None


def _joined(sentence: SentenceStamp) -> str:
    tokens = sentence.text_seg.split()
    joined = tokens[0] if tokens else ""
    for before, token in pairwise(tokens):
        space = " " if _WORD.fullmatch(before) and _WORD.fullmatch(token) else ""
        joined += space + token
    return joined + sentence.punc


def compression_ratio(text: str) -> float:
    """Whisper's: the text's UTF-8 bytes over their zlib-compressed bytes."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def delta_event(delta: str) -> dict[str, object]:
    return {"type": "transcript.text.delta", "delta": delta}


def done_event(text: str, duration_s: float) -> dict[str, object]:
    return {"type": "transcript.text.done", "text": text, "usage": usage(duration_s)}


def sse(event: dict[str, object]) -> bytes:
    """One server-sent event: a ``data:`` line of JSON (one line: JSON escapes newlines)."""
    return b"data: " + _json(event).encode("utf-8") + b"\n\n"


def _segment(index: int, cue: Cue) -> dict[str, object]:
    return {
        "id": index,
        "seek": cue.seek_ms // 10,
        "start": cue.start_ms / 1000,
        "end": cue.end_ms / 1000,
        "text": cue.text,
        "tokens": [],
        "temperature": 0.0,
        "avg_logprob": 0.0,
        "compression_ratio": compression_ratio(cue.text),
        "no_speech_prob": 0.0,
    }


def _json(body: object) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
