"""Speakers by name (sans I/O): which of a file's speakers is a known one, and the bounds of
the reference clips that make a speaker known, and their decoding (``gateway.audio.wav``).

A known speaker is a name and a voiceprint: the L2-normalised mean of CAM++ embeddings of
1.5 s windows, of a reference clip (OpenAI's ``known_speaker_references[]``, a FunASR
config's ``spk_refs``) or from the server's set (``ASR_SPEAKERS``,
``gateway.funasr.speaker_file``). A file's speaker (a cluster of its windows, with the
voiceprint its speaker stream gives: ``Decoded.voiceprints``) is named by the known speaker
whose voiceprint is nearest, when their cosine is at least ``SAME_SPEAKER``; pairs are
taken from the most alike down, each name and each speaker once, so that two speakers never
share a name and a name goes where it fits best.

``SAME_SPEAKER`` is 0.6, FunASR's own for the same comparison: its live speaker tracker
(``funasr/bin/realtime_ws.py``, ``HybridSpeakerTracker``) maps a cluster's centroid to a
known speaker's at 0.6. It is below the 0.78 at which funasr's clustering merges two
clusters of one file into one speaker: a clip recorded elsewhere (another microphone,
another day) scores lower against its speaker than two parts of one recording do. FunASR's
Python WebSocket server names a segment after any enrolled speaker above 0.2, which names
strangers; a wrong name is worse than a letter. The synthetic voices of the suite score
0.70-0.87 against their own clusters and at most 0.58 against another voice.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gateway.audio.wav import WavError, decode_wav, wav_seconds
from shared.messages import MAX_VOICEPRINT_DIMS, SpeakerTurn

SAME_SPEAKER = 0.6  # cosine: a speaker at least this alike to a known one takes its name
MAX_KNOWN_SPEAKERS = 4  # a request's references, as OpenAI takes them
REFERENCE_MIN_S = 2.0  # OpenAI's bounds on a clip, after decoding
REFERENCE_MAX_S = 10.0
# A clip as sent (a data URL or base64), before it is decoded: 10 s of 16 kHz 16-bit mono
# WAV is 427 KB of base64, of 24 kHz 640 KB; at most 4 MiB for a request's four.
REFERENCE_MAX_BYTES = 1 << 20
MAX_NAME_CHARS = 64  # OpenAI: "a short identifier (for example customer or agent)"

Voiceprint = tuple[float, ...]


class EnrolmentError(ValueError):
    """Known speakers that cannot be used; the message names the field at fault."""


@dataclass(frozen=True, slots=True)
class KnownSpeaker:
    name: str
    voiceprint: Voiceprint  # L2-normalised (``normalised``)


@dataclass(frozen=True, slots=True)
class ReferenceClip:
    """A reference as a request sent it: its WAV bytes, and its length by its header
    (``clip_seconds``), known before a sample is decoded."""

    data: bytes
    seconds: float


@dataclass(frozen=True, slots=True)
class Clip:
    """A reference decoded (``decode_clip``), with the name it gives."""

    name: str
    samples: npt.NDArray[np.int16]  # 16 kHz mono, as a file's
    seconds: float  # its header's frames over its rate


def normalised(vector: Sequence[float]) -> Voiceprint:
    """``vector`` scaled to length 1; ``ValueError`` for one with no direction (zero, not
    finite) or of more than MAX_VOICEPRINT_DIMS numbers."""
    array = np.asarray(vector, dtype=np.float64)
    if array.ndim != 1 or not 0 < len(array) <= MAX_VOICEPRINT_DIMS:
        raise ValueError(f"a voiceprint is 1 to {MAX_VOICEPRINT_DIMS} numbers")
    norm = float(np.linalg.norm(array))
    if not math.isfinite(norm) or norm == 0.0:
        raise ValueError("a voiceprint is finite numbers, not all zero")
    return tuple(float(value) for value in array / norm)


def name_speakers(
    speakers: Mapping[int, Voiceprint],
    known: Sequence[KnownSpeaker],
    threshold: float = SAME_SPEAKER,
) -> dict[int, str]:
    """Each speaker (label: voiceprint) named by a known speaker whose cosine with it is at
    least ``threshold``: the most alike pair first, each name and each speaker once. A
    voiceprint of another length (another model's) or of none (all zeros) is never
    compared."""
    pairs: list[tuple[float, int, int]] = []
    for length in {len(voiceprint) for voiceprint in speakers.values()} - {0}:
        labels = [label for label, voiceprint in speakers.items() if len(voiceprint) == length]
        indices = [n for n, speaker in enumerate(known) if len(speaker.voiceprint) == length]
        if not indices:
            continue
        # Every pair at once: a few dozen speakers by a thousand known ones is one product.
        similarity = (
            _units([speakers[label] for label in labels])
            @ _units([known[n].voiceprint for n in indices]).T
        )
        for row, column in zip(*np.nonzero(similarity >= threshold), strict=True):
            pairs.append((-float(similarity[row, column]), labels[row], indices[column]))
    names: dict[int, str] = {}
    taken: set[int] = set()
    for _, label, index in sorted(pairs):  # ties: the lower label, the earlier speaker
        if label not in names and index not in taken:
            names[label] = known[index].name
            taken.add(index)
    return names


def _units(vectors: Sequence[Voiceprint]) -> npt.NDArray[np.float64]:
    """The vectors as rows of length 1; a row of zeros becomes NaN, which matches nothing."""
    matrix = np.asarray(vectors, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        units: npt.NDArray[np.float64] = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return units


def speaker_names(
    turns: Sequence[SpeakerTurn],
    voiceprints: Sequence[Voiceprint],
    known: Sequence[KnownSpeaker],
    threshold: float = SAME_SPEAKER,
) -> dict[int, str]:
    """The names of a file's speakers: those its turns show (a label the turns no longer
    show, its windows given to a neighbour, takes no name), by their voiceprints."""
    labels = {turn.speaker for turn in turns if turn.speaker < len(voiceprints)}
    speakers = {label: voiceprints[label] for label in sorted(labels) if voiceprints[label]}
    return name_speakers(speakers, known, threshold)


def with_server_set(
    request: Sequence[KnownSpeaker], server: Sequence[KnownSpeaker]
) -> tuple[KnownSpeaker, ...]:
    """A request's known speakers, then the server's whose names the request does not
    give: the request's reference is the one that counts for its name."""
    given = {speaker.name for speaker in request}
    return (*request, *(speaker for speaker in server if speaker.name not in given))


def named_by_references(
    turns: Sequence[SpeakerTurn],
    voiceprints: Sequence[Voiceprint],
    references: Iterable[tuple[str, Voiceprint]],
    server: Sequence[KnownSpeaker],
) -> dict[int, str]:
    """The names of a file's (an utterance's) speakers, by label: its request's references
    (each name with its clip's voiceprint; a clip that gave none names no one), then the
    server's set (``with_server_set``). What OpenAI's ``diarized_json`` and a FunASR
    ``offline`` result with ``spk`` both name their speakers by."""
    request = tuple(KnownSpeaker(name, voiceprint) for name, voiceprint in references if voiceprint)
    return speaker_names(turns, voiceprints, with_server_set(request, server))


# -- a request's references -------------------------------------------------------------------


def check_name(name: str, where: str) -> str:
    """A known speaker's name, stripped: 1 to MAX_NAME_CHARS printable characters."""
    text = name.strip()
    if not 0 < len(text) <= MAX_NAME_CHARS or not text.isprintable():
        raise EnrolmentError(
            f"{where}: a name is 1 to {MAX_NAME_CHARS} printable characters, got {name!r:.80}"
        )
    return text


def check_names(names: Iterable[str], where: str) -> tuple[str, ...]:
    """The names of a request's references, each once."""
    checked = tuple(check_name(name, where) for name in names)
    if len(set(checked)) != len(checked):
        raise EnrolmentError(f"{where}: each name is given once")
    return checked


def clip_bytes(text: str, where: str) -> bytes:
    """A reference clip's bytes from a data URL (``data:audio/wav;base64,...``, as OpenAI
    takes them) or from bare base64 (a FunASR config's), strictly decoded; at most
    REFERENCE_MAX_BYTES of text, checked before anything is decoded."""
    if len(text) > REFERENCE_MAX_BYTES:
        raise EnrolmentError(f"{where}: a clip is at most {REFERENCE_MAX_BYTES} bytes of base64")
    payload = text.strip()
    if payload.startswith("data:"):
        header, comma, payload = payload.partition(",")
        if not comma or not header.endswith(";base64"):
            raise EnrolmentError(
                f"{where}: a data URL of base64 audio is data:audio/wav;base64,... ;"
                f" got {header[:40]!r}"
            )
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise EnrolmentError(f"{where}: the clip is not valid base64") from None
    if not data:
        raise EnrolmentError(f"{where}: the clip is empty")
    return data


def check_pairs(names: Sequence[str], clips: Sequence[object], where: str) -> None:
    """Names and clips pair up, at most MAX_KNOWN_SPEAKERS of them."""
    if len(names) != len(clips):
        raise EnrolmentError(
            f"{where}: {len(names)} names and {len(clips)} references; they pair up, one name"
            " for each reference"
        )
    if len(clips) > MAX_KNOWN_SPEAKERS:
        raise EnrolmentError(
            f"{where}: {len(clips)} known speakers; at most {MAX_KNOWN_SPEAKERS} are taken"
        )


def check_clip_seconds(seconds: float, where: str) -> None:
    """A clip lasts REFERENCE_MIN_S to REFERENCE_MAX_S (its header's frames over its rate)."""
    if not REFERENCE_MIN_S <= seconds <= REFERENCE_MAX_S:
        raise EnrolmentError(
            f"{where}: the clip lasts {seconds:.2f} s; a reference lasts"
            f" {REFERENCE_MIN_S:g} to {REFERENCE_MAX_S:g} s"
        )


def clip_seconds(data: bytes, where: str) -> float:
    """A clip's length by its WAV header, held to 2-10 s before a sample is decoded; an
    ``EnrolmentError`` whose message starts with ``where`` otherwise."""
    seconds = wav_seconds(data)
    if seconds is None:  # no header soundfile reads: decode_wav says what is wrong
        try:
            decode_wav(data, REFERENCE_MAX_S)
        except WavError as error:
            raise EnrolmentError(f"{where}: {error.message}") from None
        raise EnrolmentError(f"{where}: the clip has no WAV header")
    check_clip_seconds(seconds, where)
    return seconds


def decode_clip(data: bytes, where: str) -> npt.NDArray[np.int16]:
    """A clip's 16 kHz mono samples, decoded as a file is (``decode_wav``), its length
    checked by its header first; an ``EnrolmentError`` naming ``where`` otherwise. Every
    reference is decoded here (an OpenAI request's, a FunASR config's, the enrolment
    command's), so that a clip gives one voiceprint whichever way it came. Blocking
    (soundfile, soxr): call it in a thread."""
    clip_seconds(data, where)
    try:
        return decode_wav(data, REFERENCE_MAX_S)
    except WavError as error:
        raise EnrolmentError(f"{where}: {error.message}") from None


def decode_clips(names: Sequence[str], clips: Sequence[ReferenceClip]) -> tuple[Clip, ...]:
    """A FunASR config's references (``spk_names``, ``spk_refs``), decoded. Blocking."""
    return tuple(
        Clip(name, decode_clip(clip.data, f"spk_refs[{index}] ({name})"), clip.seconds)
        for index, (name, clip) in enumerate(zip(names, clips, strict=True))
    )
