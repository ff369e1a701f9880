"""``ASR_SPEAKERS``: the server's known speakers, a JSON file read once at start.

::

    {"speakers": [{"name": "alice", "voiceprint": [0.0132, -0.0871, ...]}, ...]}

Each voiceprint is what the speaker model gives a reference clip (CAM++: 192 numbers, the
L2-normalised mean of its 1.5 s windows' embeddings); ``python -m gateway.ops.enrol`` makes
the file from WAV clips through the same speaker pool the server runs, so the numbers are
the ones a request's own references would give. A voiceprint is normalised again when read
(a hand-made one need not be). Names are 1 to 64 printable characters, each once; at most
``MAX_SERVER_SPEAKERS``; every voiceprint of one length. A file that breaks any of this
stops the start in one line naming the entry at fault, before any model loads, as
``ASR_HOTWORD_RULES`` does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from gateway.funasr.known_speakers import (
    EnrolmentError,
    KnownSpeaker,
    check_name,
    normalised,
)

SETTING = "ASR_SPEAKERS"
# Naming compares each of a file's speakers with each known one: 30 by a thousand voiceprints
# of 192 numbers took 40 ms here (most of it making the numbers an array), off the event loop.
MAX_SERVER_SPEAKERS = 1000


def load_speakers(path: str | None) -> tuple[KnownSpeaker, ...]:
    """The known speakers of ``ASR_SPEAKERS`` (none without a file); a file that cannot be
    read, or is not that shape, is a ``ValueError`` in one line: serving does not start."""
    if path is None:
        return ()
    where = f"{SETTING}={path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: cannot read it: {exc}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and RecursionError's kin
        raise ValueError(f"{where}: not JSON: {exc}") from None
    return read_speakers(document, where)


def read_speakers(document: object, where: str) -> tuple[KnownSpeaker, ...]:
    """The known speakers of a parsed file, every entry checked."""
    entries = document.get("speakers") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f'{where}: the file is {{"speakers": [{{"name", "voiceprint"}}, ...]}}')
    if len(entries) > MAX_SERVER_SPEAKERS:
        raise ValueError(f"{where}: {len(entries)} speakers, at most {MAX_SERVER_SPEAKERS}")
    speakers = tuple(_speaker(entry, f"{where}: speakers[{n}]") for n, entry in enumerate(entries))
    names = [speaker.name for speaker in speakers]
    for n, name in enumerate(names):
        if name in names[:n]:
            raise ValueError(f"{where}: speakers[{n}]: the name {name!r} is given twice")
    lengths = {len(speaker.voiceprint) for speaker in speakers}
    if len(lengths) > 1:
        raise ValueError(
            f"{where}: voiceprints of {sorted(lengths)} numbers; one model's are all one length"
        )
    return speakers


def _speaker(entry: object, where: str) -> KnownSpeaker:
    if not isinstance(entry, dict) or set(entry) != {"name", "voiceprint"}:
        raise ValueError(f'{where}: an entry is {{"name": "...", "voiceprint": [numbers]}}')
    name, voiceprint = entry["name"], entry["voiceprint"]
    if not isinstance(name, str):
        raise ValueError(f"{where}: the name is not a string")
    try:
        checked = check_name(name, "name")
    except EnrolmentError as error:
        raise ValueError(f"{where}: {error}") from None
    numbers = voiceprint if isinstance(voiceprint, list) else None
    if numbers is None or not all(_is_number(value) for value in numbers):
        raise ValueError(f"{where}: the voiceprint is not a list of numbers")
    try:
        return KnownSpeaker(checked, normalised(numbers))
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None


def _is_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past what a float holds
        return False


def speakers_document(speakers: Sequence[KnownSpeaker]) -> dict[str, object]:
    """The file's JSON for ``speakers`` (what ``load_speakers`` reads back)."""
    return {
        "speakers": [
            {"name": speaker.name, "voiceprint": list(speaker.voiceprint)} for speaker in speakers
        ]
    }
