"""The session's FunASR result frames as OpenAI's transcription events (sans I/O).

A streaming pass's text (``online`` or ``2pass-online``) becomes
``...input_audio_transcription.delta`` events; the turn's final text (``2pass-offline``,
the offline model's decode of the whole turn, when one is set; else the streaming pass's
text) its ``.completed``.

A streaming engine's texts are of one of two kinds (``EngineCapabilities.text_is_delta``,
which the pool reports): each result's new text (Paraformer's), whose concatenation is the
pass's text; or the pass's text so far (the checksum engine's), whose last value is all of
it. OpenAI's deltas are new text, so a running value's delta is what it adds to the one
before when it extends it, and the whole value when it does not (a model may revise what
it said). A model that decodes its audio again as it grows (streaming SenseVoice) has its
frames made so already (``gateway.funasr.running_text``): they add, but for one marked
``revised``, whose text replaces the item's streamed text.
"""

from __future__ import annotations

from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.audio.segment import join_texts
from gateway.openai_api.realtime.server_events import (
    item_done,
    transcription_completed,
    transcription_delta,
)
from gateway.openai_api.realtime.turns import Event, InputBuffer, ItemState


class Transcripts:
    """The session's FunASR result frames in, OpenAI's transcription events out.
    ``text_is_delta``: the streaming pool's engine gives each result's new text (else the
    text so far)."""

    def __init__(self, buffer: InputBuffer, *, text_is_delta: bool) -> None:
        self._buffer = buffer
        self.text_is_delta = text_is_delta  # the model's: set again when it changes

    def result(self, frame: dict[str, object]) -> list[Event]:
        item_id = frame.get("wav_name")
        state = self._buffer.items.get(item_id) if isinstance(item_id, str) else None
        if state is None or not isinstance(item_id, str) or frame.get("is_end"):
            return []
        text = frame.get("text")
        text = text if isinstance(text, str) else ""
        final = frame.get("is_final") is True
        events: list[Event] = []
        if not state.dropped:
            _take_speakers(state, frame)
            if frame.get("mode") == "2pass-offline":
                state.finals.append(text)
            elif frame.get("resent") is True:
                # Partials sent again after a 2pass-offline frame, for FunASR's clients that
                # clear them on it: already streamed here, so nothing new.
                pass
            elif frame.get("revised") is True:
                state.texts[:] = [text]
                if text:
                    events.append(transcription_delta(item_id, text))
            elif text:
                delta = self._streamed(state, text)
                if delta:
                    events.append(transcription_delta(item_id, delta))
        if not final:
            return events
        del self._buffer.items[item_id]
        if state.dropped:
            return events
        if frame.get("mode") == "2pass-offline":
            transcript = join_texts(state.finals)
        else:
            transcript = "".join(state.texts)
        seconds = state.bytes / BYTES_PER_SECOND
        completed = transcription_completed(item_id, transcript, seconds)
        if state.speakers:  # ours, asked for: docs/openai.md
            completed["speakers"] = state.speakers
        if state.revisions:
            completed["speaker_revisions"] = state.revisions
        events.append(completed)
        if self._buffer.dialect == "ga":
            events.append(item_done(item_id, transcript))
        return events

    def _streamed(self, state: ItemState, text: str) -> str:
        """The streaming pass's next text taken into the item; what is new in it."""
        if self.text_is_delta:
            state.texts.append(text)
            return text
        old = state.texts[0] if state.texts else ""
        state.texts[:] = [text]
        return text[len(old) :] if text.startswith(old) else text


def _take_speakers(state: ItemState, frame: dict[str, object]) -> None:
    """A 2pass sentence's live speaker (its frame's ``spk``), and the tracker's relabels
    (a ``spk_revisions`` frame), for the turn's completed event."""
    if frame.get("mode") == "2pass-offline" and isinstance(frame.get("spk"), int):
        state.speakers.append({"sentence": frame.get("sentence"), "speaker": frame["spk"]})
    revisions = frame.get("spk_revisions")
    if isinstance(revisions, list):
        state.revisions += revisions
