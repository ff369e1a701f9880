"""Every frame the server sends, built here: FunASR's results, its end-of-input
acknowledgement, and our error frame.

Every one carries FunASR's four result fields, ``mode``, ``text``, ``wav_name`` and
``is_final``, because FunASR's clients read them off every frame: its HTML5 page appends
``"" + msg.text`` (a frame without ``text`` shows as "undefined"), funasr-client indexes
``msg["mode"]``, and a truthy ``is_final`` ends a client's wait.

A stream's results become frames through a :class:`ResultFrames` (sans I/O: results in,
frames out): :class:`Partials` for a streaming pass (``online``, ``2pass-online``),
:class:`WholeText` for a decode of whole audio (``offline``, in one stream or several
segments, and ``2pass-offline``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.audio.segment import join_texts
from gateway.funasr.corrections import Corrections
from gateway.funasr.running_text import RunningText
from gateway.funasr.speaker_fields import SpeakerFields
from shared.messages import SentenceStamp, SpeechTags, StreamResult

_RESULT_FIELDS = frozenset({"mode", "text", "wav_name", "is_final"})

ResultMode = Literal["online", "offline", "2pass-online", "2pass-offline"]


def _dumps(message: Mapping[str, object]) -> str:
    # allow_nan=False: NaN and Infinity are not JSON, and browsers' JSON.parse rejects them.
    return json.dumps(message, ensure_ascii=False, allow_nan=False)


def result_message(
    *,
    mode: str,
    text: str,
    wav_name: str,
    is_final: bool,
    extra: Mapping[str, object] | None = None,
) -> str:
    """A FunASR result: ``mode``, ``text``, ``wav_name``, ``is_final``, then ``extra``.

    ``extra`` may only add fields, so a FunASR client reads the result as it always has;
    one that would replace a FunASR field raises ``ValueError``.
    """
    message: dict[str, object] = {
        "mode": mode,
        "text": text,
        "wav_name": wav_name,
        "is_final": is_final,
    }
    if extra:
        clash = _RESULT_FIELDS.intersection(extra)
        if clash:
            raise ValueError(f"extra fields would replace FunASR's: {', '.join(sorted(clash))}")
        message.update(extra)
    return _dumps(message)


def end_acknowledgement(*, mode: str, wav_name: str, error: str | None = None) -> str:
    """FunASR's answer to an end frame with ``"is_end": true`` (its Python server @3c58cb5),
    after the utterance's last result: ``is_final`` true, or false with ``error`` when the
    utterance failed. ``mode`` is the session's (``online``, ``offline``, ``2pass``)."""
    message: dict[str, object] = {
        "mode": mode,
        "text": "",
        "wav_name": wav_name,
        "is_final": error is None,
        "is_end": True,
    }
    if error is not None:
        message["error"] = error
    return _dumps(message)


def error_message(code: int, message: str, mode: str = "2pass", wav_name: str = "") -> str:
    """Our error frame, sent once before closing with ``code``. FunASR's clients see a
    result with empty text that is not final (they display nothing); ours read ``type``."""
    return _dumps(
        {
            "type": "error",
            "code": code,
            "message": message,
            "mode": mode,
            "text": "",
            "wav_name": wav_name,
            "is_final": False,
        }
    )


def numbered(frame: str, result_id: int) -> str:
    """``frame`` with a resumable session's ``result_id`` added. Every frame here is a JSON
    object from ``_dumps``, so the field goes in before its closing brace."""
    assert frame.endswith("}"), "a JSON object"
    return f'{frame[:-1]}, "result_id": {result_id}}}'


def session_message(
    *,
    session_id: str,
    replica: str,
    resume_token: str,
    window_s: float,
    resumed: bool,
    utterance: int,
    samples: int,
    input_ended: bool,
    last_result: int,
) -> str:
    """A resumable session's first frame on each connection: its name and replica (the
    one a resume must reach), the token for the
    next resume (each works once), and where the session stands: the utterance whose audio
    the server is taking, how many of its samples it has, whether it has taken its end, and
    the newest result number. ``type`` and no ``mode``: not a result."""
    return _dumps(
        {
            "type": "session",
            "id": session_id,
            "replica": replica,
            "resume_token": resume_token,
            "resume_window_s": window_s,
            "resumed": resumed,
            "utterance": utterance,
            "samples": samples,
            "input_ended": input_ended,
            "last_result": last_result,
        }
    )


def ack_message(*, utterance: int, samples: int) -> str:
    """The samples of ``utterance`` the server has taken: a resume goes on from there."""
    return _dumps({"type": "ack", "utterance": utterance, "samples": samples})


def timing_fields(result: StreamResult, worker: int) -> dict[str, object]:
    """Our additive result fields, read by the benchmark; FunASR clients ignore them."""
    return {
        "seq": result.seq,
        "queue_ms": round(result.queue_ms, 3),
        "compute_ms": round(result.compute_ms, 3),
        "batch_size": result.batch_size,
        "worker": worker,
    }


def stamp_sent(sentence: SentenceStamp, offset_ms: int = 0) -> dict[str, object]:
    """One of ``stamp_sents`` as FunASR's C++ server writes it, ``offset_ms`` later."""
    return {
        "text_seg": sentence.text_seg,
        "punc": sentence.punc,
        "start": sentence.start + offset_ms,
        "end": sentence.end + offset_ms,
        "ts_list": [[start + offset_ms, end + offset_ms] for start, end in sentence.ts_list],
    }


def tag_fields(tags: SpeechTags) -> dict[str, str]:
    """SenseVoice's tags as result fields (``language``, ``emotion``, ``event``): those the
    model wrote. Ours: FunASR's servers leave them in the text or drop them."""
    fields = {"language": tags.language, "emotion": tags.emotion, "event": tags.event}
    return {name: value for name, value in fields.items() if value}


def timestamp_field(timestamps: Sequence[tuple[int, int]], offset_ms: int = 0) -> str:
    """FunASR's ``timestamp``: ``"[[start,end],...]"`` in ms from the utterance's start
    (a 2pass sentence's times are its model's plus where its audio began)."""
    shifted = [[start + offset_ms, end + offset_ms] for start, end in timestamps]
    return json.dumps(shifted, separators=(",", ":"))


@dataclass(slots=True, eq=False)  # one per utterance, told apart by identity
class Label:
    """What an utterance's frames say about it. Shared by the forwarder, which changes
    ``wav_name`` when a frame sets it and ``acknowledge`` at an ``is_end`` end, and the
    writer, which reads them as it sends."""

    mode: str  # the session's mode: online, offline, 2pass
    wav_name: str
    acknowledge: bool = False  # the end asked for the end-of-input acknowledgement
    # Its hotwords' corrections of every result's text (gateway.funasr.corrections).
    corrections: Corrections = field(default_factory=Corrections)


class ResultFrames(Protocol):
    """The frames of one pass: its streams' results in, in order, frames out."""

    @property
    def mode(self) -> ResultMode: ...

    @property
    def label(self) -> Label: ...

    @property
    def unfinished(self) -> str:
        """Why the session fails when a stream ends without its final result."""
        ...

    @property
    def background(self) -> bool:
        """The writer goes on to the next passes while this one's streams decode; its
        frames go out once they are ready, in order with the other background passes'."""
        ...

    def push(self, result: StreamResult, worker: int) -> list[str]:
        """Frames for one result of the current stream (``worker`` serves it)."""
        ...

    def finish(self) -> list[str]:
        """Frames once every stream has given its final result."""
        ...


class Partials:
    """A streaming pass: every result with text (or every one, with ``timing``) as it
    comes. ``final``: the pass ends the utterance (``online``), so its final result is
    always sent, with ``is_final``; a 2pass sentence's streaming pass is never final (its
    offline pass follows).

    With ``timing``, each chunk's result also says where in the utterance its audio ends
    (``audio_end_ms``; ``origin_bytes``: the utterance's audio before this pass, a 2pass
    sentence's start), so that a client can time it from the moment it sent that audio,
    whichever sentence it is in (``seq`` counts a pass's chunks). A final piece's result
    says nothing: it is the rest of the audio, not a chunk."""

    unfinished = "the stream ended without its final result"
    background = False

    def __init__(
        self,
        mode: ResultMode,
        label: Label,
        *,
        final: bool,
        timing: bool,
        chunk_bytes: int = 0,
        origin_bytes: int = 0,
        running: RunningText | None = None,
    ) -> None:
        self.mode = mode
        self.label = label
        self.final = final
        self.timing = timing
        self._chunk_bytes = chunk_bytes
        self._origin_bytes = origin_bytes
        # The engine's results are running values (``gateway.funasr.running_text``): the
        # utterance's text as shown so far, across its regions' passes.
        self.running = running
        self.last_text = ""  # the last result's text as its frame carried it (corrected)

    def push(self, result: StreamResult, worker: int) -> list[str]:
        text, revised, is_final = self._frame_text(result)
        if not (text or is_final or self.timing or revised):
            return []
        extra = timing_fields(result, worker)
        self.last_text = text  # as sent
        if self.timing and self._chunk_bytes and not result.is_final:
            end = self._origin_bytes + (result.seq + 1) * self._chunk_bytes
            extra["audio_end_ms"] = end * 1000 // BYTES_PER_SECOND
        if result.decoded.tags is not None:
            extra.update(tag_fields(result.decoded.tags))
        if revised:
            extra["revised"] = True
        frame = result_message(
            mode=self.mode,
            text=text,
            wav_name=self.label.wav_name,
            is_final=is_final,
            extra=extra,
        )
        return [frame]

    def _frame_text(self, result: StreamResult) -> tuple[str, bool, bool]:
        """The frame's text (corrected), whether it revises the text shown, and whether it
        is the utterance's final result."""
        text = self.label.corrections.apply(result.text)
        if self.running is not None:
            return self.running.take(text, result.is_final)
        return text, False, self.final and result.is_final

    def finish(self) -> list[str]:
        return []


class WholeText:
    """A decode of whole audio: one frame with the whole text, after the last stream's
    final result. Several streams are the segments of one long utterance (``offsets_ms``:
    where each starts): their texts joined as FunASR joins its VAD segments', their
    timestamps moved to where each starts. ``text_is_delta``: each result's text is new
    text (else the final result holds all of it). ``speakers``: more streams come after the
    segments', a speaker stream and a stream per reference clip, whose results give each of
    ``stamp_sents`` its ``spk`` (and ``spk_name``) and the frame its ``speakers`` and
    ``speaker_names`` (``gateway.funasr.speaker_fields``)."""

    background = False

    def __init__(
        self,
        mode: ResultMode,
        label: Label,
        *,
        final: bool,
        offsets_ms: Sequence[int],
        text_is_delta: bool,
        speakers: SpeakerFields | None = None,
    ) -> None:
        self.mode = mode
        self.label = label
        self.final = final
        self.unfinished = (
            "a segment's stream ended without its final result"
            if len(offsets_ms) > 1
            else "the stream ended without its final result"
        )
        self._offsets_ms = tuple(offsets_ms)
        self._text_is_delta = text_is_delta
        self._texts: list[str] = []  # one per stream that has given its final result
        self._pieces: list[str] = []  # the current stream's texts so far
        self._timestamps: list[tuple[int, int]] = []
        self._sentences: list[dict[str, object]] = []  # FunASR's C++ server's stamp_sents
        self._tags: SpeechTags | None = None  # the first segment's that has them
        self._queue_ms = self._compute_ms = 0.0
        self._last: tuple[StreamResult, int] | None = None  # the last final, its worker
        self._speakers = speakers
        # More of the frame's fields, and of each of its ``stamp_sents``: a pass's own
        # (a 2pass sentence's live speaker, ``spk``).
        self.fields: dict[str, object] = {}
        self.sentence_fields: dict[str, object] = {}

    def push(self, result: StreamResult, worker: int) -> list[str]:
        if self._speakers is not None and len(self._texts) == len(self._offsets_ms):
            self._speakers.push(result)  # the speaker streams come after every segment's
            return []
        self._pieces.append(result.text)
        self._queue_ms += result.queue_ms
        self._compute_ms += result.compute_ms
        if result.is_final:
            offset = self._offsets_ms[len(self._texts)]
            self._texts.append("".join(self._pieces) if self._text_is_delta else result.text)
            self._pieces = []
            self._timestamps += [
                (start + offset, end + offset) for start, end in result.decoded.timestamps
            ]
            self._sentences += [
                stamp_sent(sentence, offset) for sentence in result.decoded.sentences
            ]
            self._tags = self._tags or result.decoded.tags
            self._last = (result, worker)
        return []

    def finish(self) -> list[str]:
        assert self._last is not None, "every stream gave its final result"
        result, worker = self._last
        extra = timing_fields(result, worker)
        # The sums over the utterance's pieces: its whole queue and compute time.
        extra.update(queue_ms=round(self._queue_ms, 3), compute_ms=round(self._compute_ms, 3))
        if self._timestamps:
            extra["timestamp"] = timestamp_field(self._timestamps)
        if self._speakers is not None:
            self._speakers.add_to(self._sentences, extra)
        if self._sentences:
            extra["stamp_sents"] = [{**s, **self.sentence_fields} for s in self._sentences]
        if self._tags is not None:
            extra.update(tag_fields(self._tags))
        extra.update(self.fields)
        frame = result_message(
            mode=self.mode,
            text=self.label.corrections.apply(join_texts(self._texts)),
            wav_name=self.label.wav_name,
            is_final=self.final,
            extra=extra,
        )
        return [frame]
