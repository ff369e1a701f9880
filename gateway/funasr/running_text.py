"""A streaming pass whose results are running values, as frames that append (sans I/O).

Paraformer's results are deltas: each is the new text of its chunk, and FunASR's clients
append every frame's text to what they show. A model that decodes its audio again as it
grows (streaming SenseVoice: ``EngineCapabilities.regions``) gives instead the text so far,
and may revise what it said before. Such a
result goes out as what it adds when it extends the text already shown, and otherwise
whole, marked ``"revised": true`` (ours): the frame's text replaces the online text the
client holds (FunASR's clients, which know no revisions, append it; a client that reads
the field shows the revision). Every text a client is shown is then what the model says of
the audio so far. (The checksum engine's running values are no text to append to: its
frames carry each value whole, as they always have.)

In ``online`` mode a re-decoding model's utterance is one pass per speech region
(``EngineCapabilities.regions``): :class:`RunningText` holds what its frames have shown
across them, the finished regions' final texts joined as FunASR joins its VAD segments'
(a space), then the open region's text so far.
"""

from __future__ import annotations


def running_frame_text(shown: str, text: str) -> tuple[str, bool]:
    """What a frame carries for the running value ``text`` after ``shown`` was shown: the
    new end of it when it extends ``shown``, else all of it; and whether it revises."""
    if text.startswith(shown):
        return text[len(shown) :], False
    return text, True


class RunningText:
    """An ``online`` utterance's text as its frames have shown it, across its regions'
    passes, and which region's final result ends the utterance."""

    def __init__(self) -> None:
        self._settled = ""  # the finished regions' final texts
        self._shown = ""  # what the frames so far add up to
        self._finals = 0  # regions whose final result has come
        self.last_region: int | None = None  # set once the utterance has ended

    def take(self, region_text: str, region_final: bool) -> tuple[str, bool, bool]:
        """One result of the open region: the frame's text, whether it revises, and
        whether it is the utterance's final result."""
        full = " ".join(t for t in (self._settled, region_text) if t)
        text, revised = running_frame_text(self._shown, full)
        self._shown = full
        last = False
        if region_final:
            self._settled = full
            self._finals += 1
            last = self._finals == self.last_region
        return text, revised, last
