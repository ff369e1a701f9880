"""The speaker fields of an ``offline`` result with ``spk`` (sans I/O): results of the
speaker streams in, fields out.

After its segments' streams, such an utterance relays its speaker stream (its speech
regions, embedded and clustered: the turns, and each speaker label's voiceprint), then one
stream for each reference clip of its config (``spk_refs``: a clip as one region, so label
0's voiceprint is the clip's, as ``gateway.whole.speakers.reference_voiceprint`` has it).
From them the frame gets:

- ``spk`` on each of ``stamp_sents``: the speaker whose turns overlap it most (funasr's
  ``distribute_spk``), and ``spk_name`` where a known speaker names that speaker;
- ``speakers``: the turns, ``[{"start", "end", "spk"}]`` in ms;
- ``speaker_names``: each named speaker's name by its ``spk``, as a string key (JSON's
  keys are strings), ``{}`` when none is named.

A speaker is named as OpenAI's ``diarized_json`` names one
(``gateway.funasr.known_speakers.named_by_references``): by the config's clips, then by
the server's set (ASR_SPEAKERS), at a cosine of 0.6 or more, each name once. FunASR's
Python server (``funasr_wss_server.py`` with a ``speaker_db``) puts one ``spk_name`` and
``spk_score`` on each message; an utterance here has several speakers, so the name goes on
each sentence, and ``spk`` keeps its int.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.funasr.known_speakers import KnownSpeaker, Voiceprint, named_by_references
from gateway.funasr.speaker_labels import sentence_speakers, turns_json
from shared.messages import SpeakerTurn, StreamResult


class SpeakerFields:
    """The speaker stream's and the reference clips' streams' results, in that order
    (``push``), and the fields they give a frame (``add_to``). ``references``: the clips'
    names, one stream each; ``known``: the server's known speakers."""

    def __init__(self, references: Sequence[str] = (), known: Sequence[KnownSpeaker] = ()) -> None:
        self._references = tuple(references)
        self._known = tuple(known)
        self._turns: tuple[SpeakerTurn, ...] = ()
        self._voiceprints: tuple[Voiceprint, ...] = ()
        self._clips: list[Voiceprint] = []  # each clip's voiceprint, as its stream ends
        self._ended = 0  # streams that have given their final result

    @property
    def streams(self) -> int:
        """How many streams come: the speaker stream and a stream per clip."""
        return 1 + len(self._references)

    def push(self, result: StreamResult) -> None:
        decoded = result.decoded
        if self._ended == 0:  # the speaker stream's: its final result has them
            self._turns = decoded.speakers or self._turns
            self._voiceprints = decoded.voiceprints or self._voiceprints
        elif result.is_final:  # a clip's: under 20 windows, all of them label 0
            self._clips.append(decoded.voiceprints[0] if decoded.voiceprints else ())
        if result.is_final:
            self._ended += 1

    def names(self) -> dict[int, str]:
        """The named speakers' names, by label."""
        assert self._ended == self.streams, "every speaker stream gave its final result"
        references = zip(self._references, self._clips, strict=True)
        return named_by_references(self._turns, self._voiceprints, references, self._known)

    def add_to(self, sentences: list[dict[str, object]], extra: dict[str, object]) -> None:
        """Each sentence's ``spk`` (and ``spk_name``), and the frame's ``speakers`` and
        ``speaker_names``. ``sentences``: ``stamp_sents``, each with its ``start``, ``end``."""
        names = self.names()
        spans = [(int(s["start"]), int(s["end"])) for s in sentences]  # type: ignore[call-overload]
        for sentence, speaker in zip(sentences, sentence_speakers(spans, self._turns), strict=True):
            sentence["spk"] = speaker
            if speaker in names:
                sentence["spk_name"] = names[speaker]
        extra["speakers"] = turns_json(self._turns)
        extra["speaker_names"] = {str(label): name for label, name in sorted(names.items())}
