"""The FunASR session's result frames as Deepgram's live messages (sans I/O).

Per utterance (``gateway.deepgram.stream``):

- the streaming pass's partials (``online``, ``2pass-online``) are ``Results`` with
  ``is_final: false``, with ``interim_results``: the text not yet final, so far;
- each ``2pass-offline`` frame (a sentence decoded whole by the offline model, punctuated
  and normalised) is a ``Results`` with ``is_final: true``; without an offline model
  (``online``), the utterance's final result is, with its streaming text;
- the utterance's final result is ``speech_final`` where a pause ended it, and
  ``from_finalize`` where the client's ``Finalize`` did;
- ``UtteranceEnd`` (with ``utterance_end_ms``) once decoding has gone that long past the
  last final word with no word since: by the audio decoded (each chunk's result says where
  its audio ends), not the audio taken, whose words may still be on their way.

A ``Finalize`` with nothing open to end is answered with an empty final ``Results`` after
every utterance before it has had its own, in the stream's order, as Deepgram answers.

A streaming engine's texts are each result's new text (``text_is_delta``, Paraformer's) or
the text so far (the checksum engine's): the interim transcript is their concatenation or
the last. A frame marked ``revised`` (a re-decoding model's, ``gateway.funasr.running_text``)
replaces the interim transcript.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from gateway.deepgram.params import ListenParams
from gateway.deepgram.stream import ListenStream, Utterance
from gateway.deepgram.words import Word, joined, timed_words

Message = dict[str, object]
CONFIDENCE = 0.0  # our models give none; Deepgram's field is required (docs/deepgram.md)
CHANNEL_INDEX = [0, 1]  # Deepgram's: channel 0 of 1


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What ``Results.metadata`` and ``Metadata`` say of the model."""

    request_id: str
    uuid: str
    name: str
    arch: str  # the engine that serves it

    def model_info(self) -> Message:
        return {"name": self.name, "version": "asr-gateway", "arch": self.arch}

    def results_metadata(self) -> Message:
        return {
            "request_id": self.request_id,
            "model_info": self.model_info(),
            "model_uuid": self.uuid,
        }


@dataclass(slots=True)
class _Texts:
    """An utterance's text not yet final: the streaming pass's, since its last final."""

    pieces: list[str] = field(default_factory=list)
    settled_s: float = 0.0  # where its final text so far ends, seconds into the stream
    decoded_s: float = 0.0  # where the audio its results cover ends, seconds into the stream


class ListenResults:
    """The session's FunASR frames in, Deepgram's messages out."""

    def __init__(
        self, stream: ListenStream, params: ListenParams, model: ModelInfo, *, text_is_delta: bool
    ) -> None:
        self.model = model
        self.text_is_delta = text_is_delta
        self._stream = stream
        self._params = params
        self._texts: dict[str, _Texts] = {}
        self._last_word_end: float | None = None
        self._utterance_end_due = False  # a final word since the last UtteranceEnd, none after
        self._decoded_s = 0.0  # how far the results have covered the stream's audio
        self._finalize_answers_owed = 0  # Finalizes with nothing open, behind utterances

    @property
    def answered(self) -> bool:
        """Every utterance the session was given has had its final result."""
        return not self._stream.utterances

    def result(self, frame: dict[str, object]) -> list[Message]:
        wav_name = frame.get("wav_name")
        utterance = self._stream.utterances.get(wav_name) if isinstance(wav_name, str) else None
        if utterance is None or frame.get("is_end"):
            return []
        start = utterance.start_s
        texts = self._texts.setdefault(utterance.wav_name, _Texts(settled_s=start, decoded_s=start))
        audio_end_ms = frame.get("audio_end_ms")
        if isinstance(audio_end_ms, int):
            texts.decoded_s = max(texts.decoded_s, start + audio_end_ms / 1000)
            self._decoded_s = max(self._decoded_s, texts.decoded_s)
        text = frame.get("text")
        text = text if isinstance(text, str) else ""
        last = frame.get("is_final") is True  # the utterance's final result
        messages: list[Message] = []
        if frame.get("mode") == "2pass-offline":
            speaker = frame.get("spk")  # with diarize: the sentence's live speaker
            speaker = speaker if isinstance(speaker, int) else None
            name = self._speaker_name(frame.get("spk_name"))
            final = self._final(utterance, texts, text, frame.get("timestamp"), last, speaker, name)
            messages.append(final)
        elif frame.get("resent") is True:
            texts.pieces = [text] if text else []  # the later sentences' partials, again
        else:
            if frame.get("revised") is True:
                texts.pieces = [text] if text else []
                self._utterance_end_due = False
            elif text:
                self._take_partial(texts, text)
            if last:
                streamed = "".join(texts.pieces)
                messages.append(self._final(utterance, texts, streamed, None, last))
            elif (text or frame.get("revised") is True) and self._params.interim_results:
                messages.append(self._interim(texts))
        if last:
            self._decoded_s = max(self._decoded_s, utterance.end_s)
            del self._stream.utterances[utterance.wav_name]
            del self._texts[utterance.wav_name]
            if self.answered:
                for _ in range(self._finalize_answers_owed):
                    messages.append(self.finalize_answer())
                self._finalize_answers_owed = 0
        return messages + self.tick()

    def tick(self) -> list[Message]:
        """``UtteranceEnd``, where the audio has gone ``utterance_end_ms`` past the last
        final word with no word since."""
        gap_ms = self._params.utterance_end_ms
        if gap_ms is None or not self._utterance_end_due or self._last_word_end is None:
            return []
        if self._decoded_s - self._last_word_end < gap_ms / 1000:
            return []
        self._utterance_end_due = False
        return [
            {
                "type": "UtteranceEnd",
                "channel": CHANNEL_INDEX,
                "last_word_end": round(self._last_word_end, 3),
            }
        ]

    def finalize_unopened(self) -> list[Message]:
        """A ``Finalize`` with no utterance open: nothing to decode. Its empty answer goes
        now if every utterance before it is answered, else after the last of them."""
        if self.answered:
            return [self.finalize_answer()]
        self._finalize_answers_owed += 1
        return []

    def finalize_answer(self) -> Message:
        position = self._stream.position_s
        return self._results([], "", position, position, is_final=True, from_finalize=True)

    # -- helpers --------------------------------------------------------------------------

    def _take_partial(self, texts: _Texts, text: str) -> None:
        if self.text_is_delta:
            texts.pieces.append(text)
        else:
            texts.pieces = [text]
        self._utterance_end_due = False  # a word after the last final one

    def _interim(self, texts: _Texts) -> Message:
        transcript = "".join(texts.pieces)
        start, end = texts.settled_s, max(texts.settled_s, texts.decoded_s)
        words = timed_words(transcript, start, end)
        return self._results(words, self._shown(transcript, words), start, end, is_final=False)

    def _final(
        self,
        utterance: Utterance,
        texts: _Texts,
        text: str,
        timestamp: object,
        last: bool,
        speaker: int | None = None,
        speaker_name: str | None = None,
    ) -> Message:
        start = texts.settled_s
        # The utterance's end is known at its last result; an earlier sentence's end is
        # its last word's, or where the audio decoded so far reaches.
        end = utterance.end_s if last else max(start, texts.decoded_s)
        words = timed_words(text, start, end, _token_times(timestamp), utterance.start_s)
        if speaker is not None:
            words = [replace(w, speaker=speaker, speaker_name=speaker_name) for w in words]
        if words and not last:
            end = max(start, words[-1].end)
        texts.settled_s, texts.pieces = end, []
        if words:
            self._last_word_end = words[-1].end
            self._utterance_end_due = True
        return self._results(
            words,
            self._shown(text, words),
            start,
            end,
            is_final=True,
            speech_final=last and utterance.ending == "pause",
            from_finalize=last and utterance.ending == "finalize",
        )

    def _speaker_name(self, name: object) -> str | None:
        """A sentence's speaker's name, if the stream lets it be named (``known_speaker``)."""
        allowed = self._params.known_speakers
        if not isinstance(name, str) or (allowed is not None and name not in allowed):
            return None
        return name

    def _shown(self, text: str, words: list[Word]) -> str:
        """The transcript as Deepgram formats it: the model's text with ``punctuate`` or
        ``smart_format``, else its words bare and in lower case."""
        if self._params.punctuate or self._params.smart_format:
            return text.strip()
        return joined([word.word for word in words])

    def _results(
        self,
        words: list[Word],
        transcript: str,
        start: float,
        end: float,
        *,
        is_final: bool,
        speech_final: bool = False,
        from_finalize: bool = False,
    ) -> Message:
        message: Message = {
            "type": "Results",
            "channel_index": CHANNEL_INDEX,
            "duration": round(max(0.0, end - start), 3),
            "start": round(start, 3),
            "is_final": is_final,
            "speech_final": speech_final,
            "channel": {
                "alternatives": [
                    {
                        "transcript": transcript,
                        "confidence": CONFIDENCE,
                        "words": [word.message(CONFIDENCE) for word in words],
                    }
                ]
            },
            "metadata": self.model.results_metadata(),
        }
        if is_final:
            message["from_finalize"] = from_finalize
        return message


def _token_times(timestamp: object) -> list[tuple[int, int]] | None:
    """FunASR's ``timestamp`` field (``"[[start,end],...]"``, ms) as pairs, if it is one."""
    if not isinstance(timestamp, str):
        return None
    try:
        pairs = json.loads(timestamp)
    except ValueError:
        return None
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(v, int) for v in p) for p in pairs
    ):
        return None
    return [(begin, finish) for begin, finish in pairs]
