"""A file's transcript in OpenAI's response formats (sans I/O): ``json``, ``text``, ``srt``,
``vtt``, ``verbose_json``, and the streamed events of ``stream=true``.

A file comes as its decoded segments (``gateway.session.long_audio``: cut at pauses, each at most
``ASR_MAX_SEGMENT_SECONDS``; a short file is one). Each becomes a subtitle cue and a
``verbose_json`` segment; a segment whose text is empty (silence) becomes neither, as its
text is left out of the joined one. A cue's times are the segment's first token's start
and last token's end where the model gives token times (BiCifParaformer), else the
segment's bounds in the file.

``verbose_json`` follows the SDK's ``TranscriptionVerbose``, ``TranscriptionSegment`` and
``TranscriptionWord`` field by field. What a Paraformer cannot tell truthfully is filled
with neutral values, so that code written for Whisper's output reads it as a good segment:

=================== ==========================================================================
field               here
=================== ==========================================================================
``language``        the language the model heard (SenseVoice), else the request's as
                    given, else ``""`` (a Paraformer detects none)
``segments[].seek`` where the segment starts, in 10 ms frames (Whisper's unit for ``seek``)
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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
RESPONSE_FORMATS: tuple[ResponseFormat, ...] = ("json", "text", "srt", "verbose_json", "vtt")
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


@dataclass(frozen=True, slots=True)
class TimedSegment:
    """A decoded segment: its bounds in the file and its token times, in ms."""

    start_ms: int
    end_ms: int
    text: str
    token_times: tuple[tuple[int, int], ...] = ()

    @property
    def cue_ms(self) -> tuple[int, int]:
        """Where its cue starts and ends: from the token times where there are any."""
        if self.token_times:
            return self.token_times[0][0], self.token_times[-1][1]
        return self.start_ms, self.end_ms


@dataclass(frozen=True, slots=True)
class FileTranscript:
    text: str  # the segments' texts joined as FunASR joins them
    duration_s: float
    language: str
    segments: tuple[TimedSegment, ...]

    @property
    def spoken(self) -> tuple[TimedSegment, ...]:
        """The segments with text: one cue and one ``verbose_json`` segment each."""
        return tuple(segment for segment in self.segments if segment.text)


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


def timecode(ms: int, separator: str) -> str:
    """``HH:MM:SS,mmm`` (SRT: ``separator=","``) or ``HH:MM:SS.mmm`` (WebVTT)."""
    seconds, millis = divmod(max(ms, 0), 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{millis:03d}"


def srt(transcript: FileTranscript) -> str:
    cues = []
    for number, segment in enumerate(transcript.spoken, start=1):
        start, end = segment.cue_ms
        cues.append(
            f"{number}\n{timecode(start, ',')} --> {timecode(end, ',')}\n{segment.text}\n\n"
        )
    return "".join(cues)


def vtt(transcript: FileTranscript) -> str:
    cues = ["WEBVTT\n\n"]
    for segment in transcript.spoken:
        start, end = segment.cue_ms
        cues.append(f"{timecode(start, '.')} --> {timecode(end, '.')}\n{segment.text}\n\n")
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
        "segments": [_segment(index, s) for index, s in enumerate(transcript.spoken)],
    }
    if "word" in granularities:
        body["words"] = [
            {"word": word, "start": start / 1000, "end": end / 1000}
            for segment in transcript.spoken
            for word, (start, end) in words_of(segment)
        ]
    body["usage"] = usage(transcript.duration_s)
    return body


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


def _segment(index: int, segment: TimedSegment) -> dict[str, object]:
    start, end = segment.cue_ms
    return {
        "id": index,
        "seek": segment.start_ms // 10,
        "start": start / 1000,
        "end": end / 1000,
        "text": segment.text,
        "tokens": [],
        "temperature": 0.0,
        "avg_logprob": 0.0,
        "compression_ratio": compression_ratio(segment.text),
        "no_speech_prob": 0.0,
    }


def _json(body: object) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))
