"""A 2pass utterance's frames, in an order that FunASR's clients show whole (sans I/O).

FunASR's clients keep two texts (its HTML5 page's ``offline_text`` and ``rec_text``,
``funasr_wss_client.py``'s ``text_print_2pass_offline`` and ``text_print_2pass_online``):
the offline text, every ``2pass-offline`` frame's text appended, and the online text, every
``2pass-online`` frame's text appended since the last ``2pass-offline`` frame, which clears
it. They show the offline text followed by the online text.

A sentence's partials go out as they come, even while an earlier sentence's offline decode
is pending (the writer relays offline passes in the background: ``SentenceText.background``),
so the online text a client holds is the partials of every sentence not yet settled, in
order. Each ``2pass-offline`` frame clears all of them, its own sentence's and the later
ones'; right after it one ``2pass-online`` frame, marked ``"resent": true``, gives back the
later sentences' partials as sent so far. So the client shows, after every frame, the
settled sentences' offline texts followed by the partials of the others (but for the
instant between an offline frame and its resend, which go out together), and in the end
the offline texts alone: nothing it was shown is lost, nothing is shown twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.funasr.known_speakers import KnownSpeaker, name_speakers
from gateway.funasr.results import Label, Partials, WholeText, result_message
from gateway.funasr.running_text import running_frame_text
from gateway.speakers.tracker import SpeakerRevision, SpeakerTracker
from shared.messages import StreamResult


class ShownPartials:
    """The partial text sent of each sentence of an utterance not yet settled, oldest
    first: what a client's online text holds."""

    def __init__(self) -> None:
        self._texts: dict[int, list[str]] = {}  # sentences in the order they began

    def sent(self, sentence: int, text: str) -> None:
        if text:
            self._texts.setdefault(sentence, []).append(text)

    def text_of(self, sentence: int) -> str:
        return "".join(self._texts.get(sentence, ()))

    def revise(self, sentence: int, text: str) -> str:
        """``sentence``'s partial text is now ``text``, sent whole in a revising frame: the
        client's online text that frame replaces, which it carries (the earlier unsettled
        sentences' partials, then ``text``; no later sentence has partials yet, as the
        streaming passes are relayed in order)."""
        self._texts[sentence] = [text]
        return "".join(text for texts in self._texts.values() for text in texts)

    def settle(self, sentence: int) -> str:
        """``sentence``'s offline frame goes out, which clears a client's online text:
        forget its partials (and any earlier sentence's), and return the later sentences'
        partial text, which the client must be sent again."""
        for settled in [number for number in self._texts if number <= sentence]:
            del self._texts[settled]
        return "".join(text for texts in self._texts.values() for text in texts)


class SentencePartials(Partials):
    """Sentence ``sentence``'s streaming pass: ``2pass-online`` frames, never final, whose
    texts ``shown`` records as they go out. ``running``: the engine's results are the
    sentence's text so far (``gateway.funasr.running_text``): a result that extends what
    was shown of it goes as its new end, another whole, as a revising frame that carries
    the client's whole online text."""

    def __init__(
        self,
        shown: ShownPartials,
        sentence: int,
        label: Label,
        *,
        timing: bool,
        chunk_bytes: int,
        origin_bytes: int,
        running: bool = False,
    ) -> None:
        super().__init__(
            "2pass-online",
            label,
            final=False,
            timing=timing,
            chunk_bytes=chunk_bytes,
            origin_bytes=origin_bytes,
        )
        self._shown = shown
        self._sentence = sentence
        self._running_values = running

    def _frame_text(self, result: StreamResult) -> tuple[str, bool, bool]:
        text = self.label.corrections.apply(result.text)
        if not self._running_values:
            self._shown.sent(self._sentence, text)
            return text, False, False
        added, revised = running_frame_text(self._shown.text_of(self._sentence), text)
        if revised:
            return self._shown.revise(self._sentence, text), True, False
        self._shown.sent(self._sentence, added)
        return added, False, False


class SentenceText(WholeText):
    """Sentence ``sentence``'s offline pass: its ``2pass-offline`` frame, then the later
    sentences' partials resent, if they have any. Relayed in the background, behind the
    later sentences' partials.

    ``speakers`` (``"spk": true``): the session's live speaker tracker. A second stream
    follows the offline decode's, the speaker pool's embeddings of the sentence's windows;
    the tracker labels the sentence when its frame goes out (frames go in sentence order),
    as ``spk`` on the frame and on each of its ``stamp_sents``, with the sentence's number
    in the session (``sentence``), and ``spk_name`` where its id's centre sounds like one
    of the ``known`` speakers (the server's set). Before each utterance's final frame the tracker
    re-clusters its history, and what that relabels goes out as one ``spk_revisions``
    frame; the relabels hold for the rest of the session."""

    background = True

    def __init__(
        self,
        shown: ShownPartials,
        sentence: int,
        label: Label,
        *,
        final: bool,
        offset_ms: int,
        text_is_delta: bool,
        speakers: SpeakerTracker | None = None,
        known: Sequence[KnownSpeaker] = (),
    ) -> None:
        super().__init__(
            "2pass-offline",
            label,
            final=final,
            offsets_ms=[offset_ms],
            text_is_delta=text_is_delta,
        )
        self._shown = shown
        self._sentence = sentence
        self._tracker = speakers
        self._known = known
        self._decoded = False  # the offline decode's final result has come
        self._windows: tuple[tuple[float, ...], ...] = ()

    def push(self, result: StreamResult, worker: int) -> list[str]:
        if self._tracker is not None and self._decoded:  # the speaker stream's
            self._windows = result.decoded.window_embeddings or self._windows
            return []
        self._decoded = result.is_final
        return super().push(result, worker)

    def finish(self) -> list[str]:
        revisions: list[str] = []
        if self._tracker is not None:
            number = self._tracker.next_sentence  # the session's, in the frames' order
            speaker = self._tracker.assign(number, self._windows)
            self.fields.update(spk=speaker, sentence=number)
            self.sentence_fields["spk"] = speaker
            # All the ids at once, so that a name goes to one id (the most alike).
            name = name_speakers(self._tracker.centres(), self._known).get(speaker)
            if name is not None:
                self.fields["spk_name"] = self.sentence_fields["spk_name"] = name
            if self.final:
                revisions = speaker_revisions(self._tracker.revise(), self.label.wav_name)
        frames = revisions + super().finish()
        resent = self._shown.settle(self._sentence)
        if resent:
            frames.append(resent_partials(resent, self.label.wav_name))
        return frames


def resent_partials(text: str, wav_name: str) -> str:
    """The partial text a ``2pass-offline`` frame cleared in FunASR's clients, sent again.
    ``resent`` (ours) tells a client that reads partials as deltas of one transcript to
    skip it; it carries no timing fields: it is no chunk's result."""
    return result_message(
        mode="2pass-online", text=text, wav_name=wav_name, is_final=False, extra={"resent": True}
    )


def speaker_revisions(revisions: Sequence[SpeakerRevision], wav_name: str) -> list[str]:
    """The tracker's relabels at the end of the utterance, as one frame before the final
    one (none if nothing changed): ``spk_revisions``, each sentence's number and its new
    ``spk`` (``was``: the label its frame had). A ``2pass-online`` frame with no text, so
    that FunASR's clients, which know no revision, show nothing new."""
    if not revisions:
        return []
    changes = [{"sentence": r.sentence, "spk": r.new, "was": r.old} for r in revisions]
    extra = {"spk_revisions": changes}
    return [
        result_message(mode="2pass-online", text="", wav_name=wav_name, is_final=False, extra=extra)
    ]
