"""OpenAI's known speakers on ``/v1/audio/transcriptions``: ``known_speaker_names[]`` and
``known_speaker_references[]`` name the speakers of a ``diarized_json`` answer.

A reference is a data URL of a 2-10 s clip (``data:audio/wav;base64,...``), paired with the
name at its place; up to 4, as OpenAI takes them. Each is bounded twice before any work:
its text by ``REFERENCE_MAX_BYTES`` as the form arrives (a larger one, or a fifth, is read
past and only counted, ``gateway.files.multipart.FieldCap``), its length by its WAV header;
then it is decoded as the file is (``gateway.funasr.known_speakers.decode_clip``). Its seconds are
added to the file's before the file is decoded: the two together are at most
ASR_MAX_SESSION_SECONDS (413 ``too_long``), so a request's speaker work is bounded as a
file's is. Each clip is then embedded by the speaker pool beside the file's own speakers
(``gateway.whole.speakers.with_speakers``), and names the file's speaker it is at least
``SAME_SPEAKER`` alike to (``gateway.funasr.known_speakers``); a speaker no name fits keeps
its letter. The server's own set (ASR_SPEAKERS) is searched too; a request's reference
counts over the server's for the same name.

OpenAI's rule, as for every field this endpoint cannot use: references are read only
where they are used, for ``diarized_json``; anywhere else they are ignored, never refused.
Where they are used, every fault is a 400 ``bad_known_speakers`` naming the field and
the reference at fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import numpy as np
import numpy.typing as npt

from gateway.audio.wav import wav_seconds
from gateway.files.multipart import FieldCap, Form
from gateway.files.request import TranscribeError
from gateway.funasr.known_speakers import (
    MAX_KNOWN_SPEAKERS,
    REFERENCE_MAX_BYTES,
    Clip,
    EnrolmentError,
    KnownSpeaker,
    check_names,
    check_pairs,
    clip_bytes,
    clip_seconds,
    decode_clip,
    named_by_references,
)
from gateway.whole.speakers import Speakers

NAMES = "known_speaker_names[]"
REFERENCES = "known_speaker_references[]"
# The names are text fields of the form's usual size; the clips are capped fields.
CAPS = {REFERENCES: FieldCap(REFERENCE_MAX_BYTES, MAX_KNOWN_SPEAKERS)}
REASON = "bad_known_speakers"


@dataclass(frozen=True, slots=True)
class Enrolment:
    """A request's known speakers, decoded and checked."""

    clips: tuple[Clip, ...] = ()

    @property
    def samples(self) -> tuple[npt.NDArray[np.int16], ...]:
        return tuple(clip.samples for clip in self.clips)


def reference_texts(form: Form) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names and the clips' text of a form, paired and bounded; a 400 otherwise."""
    dropped = form.dropped.get(REFERENCES, 0)
    references = form.values(REFERENCES)
    try:
        # Dropped while fewer than the cap were kept: for its size.
        if dropped and len(references) < MAX_KNOWN_SPEAKERS:
            raise EnrolmentError(
                f"{REFERENCES}: a reference is at most {REFERENCE_MAX_BYTES} bytes of data URL"
            )
        names = check_names(form.values(NAMES), NAMES)
        check_pairs(names, (*references, *([""] * dropped)), f"{NAMES} and {REFERENCES}")
    except EnrolmentError as error:
        raise TranscribeError(400, REASON, str(error)) from None
    return names, references


async def enrol(form: Form, file: bytes, max_seconds: float) -> Enrolment:
    """The form's known speakers, decoded off the event loop; a 400 for any at fault. What
    they cost is bounded first, by their text and their headers, and added to ``file``'s:
    together at most ``max_seconds`` (ASR_MAX_SESSION_SECONDS), else a 413."""
    names, references = reference_texts(form)
    clips: list[tuple[str, bytes, float]] = []
    try:
        for index, (name, text) in enumerate(zip(names, references, strict=True)):
            where = f"{REFERENCES.removesuffix('[]')}[{index}] ({name})"
            data = clip_bytes(text, where)
            clips.append((where, data, clip_seconds(data, where)))  # a header's read
        check_cost(file, sum(seconds for _, _, seconds in clips), max_seconds)
        decoded = []
        for (where, data, seconds), name in zip(clips, names, strict=True):
            samples = await anyio.to_thread.run_sync(decode_clip, data, where)
            decoded.append(Clip(name, samples, seconds))
    except EnrolmentError as error:
        raise TranscribeError(400, REASON, str(error)) from None
    return Enrolment(tuple(decoded))


def check_cost(file: bytes, references_s: float, max_seconds: float) -> None:
    """The file's seconds and its references' together within ``max_seconds``, by their
    headers, before either is decoded."""
    if not references_s:
        return
    seconds = wav_seconds(file)
    if seconds is not None and seconds + references_s > max_seconds:
        raise TranscribeError(
            413,
            "too_long",
            f"the audio lasts {seconds:.0f} s and its known speakers' references"
            f" {references_s:.0f} s: more than {max_seconds:g} s together"
            " (ASR_MAX_SESSION_SECONDS)",
        )


def names_of(
    speakers: Speakers, enrolment: Enrolment, server: Sequence[KnownSpeaker]
) -> dict[int, str]:
    """The file's speakers that a reference or the server's set names, by label."""
    references = zip((clip.name for clip in enrolment.clips), speakers.references, strict=True)
    return named_by_references(speakers.turns, speakers.voiceprints, references, server)
