"""gateway.funasr.speaker_file: ASR_SPEAKERS read at start, every fault in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.funasr.known_speakers import KnownSpeaker
from gateway.funasr.speaker_file import (
    MAX_SERVER_SPEAKERS,
    load_speakers,
    read_speakers,
    speakers_document,
)


def write(tmp_path: Path, document: object) -> str:
    path = tmp_path / "speakers.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def test_no_file_no_speakers_and_a_written_file_reads_back(tmp_path: Path) -> None:
    assert load_speakers(None) == ()
    speakers = (KnownSpeaker("alice", (0.6, 0.8)), KnownSpeaker("鲍勃", (1.0, 0.0)))
    assert load_speakers(write(tmp_path, speakers_document(speakers))) == speakers


def test_voiceprints_are_normalised_when_read(tmp_path: Path) -> None:
    path = write(tmp_path, {"speakers": [{"name": "alice", "voiceprint": [3, 4.0]}]})
    assert load_speakers(path) == (KnownSpeaker("alice", (0.6, 0.8)),)


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ([], "the file is"),
        ({"speakers": {}}, "the file is"),
        ({"speakers": [{"name": "a"}]}, r"speakers\[0\]: an entry is"),
        ({"speakers": [{"name": "a", "voiceprint": [1.0], "x": 1}]}, "an entry is"),
        ({"speakers": [{"name": 7, "voiceprint": [1.0]}]}, "not a string"),
        ({"speakers": [{"name": " ", "voiceprint": [1.0]}]}, "printable characters"),
        ({"speakers": [{"name": "a", "voiceprint": "1,2"}]}, "not a list of numbers"),
        ({"speakers": [{"name": "a", "voiceprint": [1.0, True]}]}, "not a list of numbers"),
        ({"speakers": [{"name": "a", "voiceprint": [10**400]}]}, "not a list of numbers"),
        ({"speakers": [{"name": "a", "voiceprint": [0.0, 0.0]}]}, "not all zero"),
        ({"speakers": [{"name": "a", "voiceprint": []}]}, "1 to 512 numbers"),
        (
            {"speakers": [{"name": "a", "voiceprint": [1.0]}, {"name": "a", "voiceprint": [1]}]},
            r"speakers\[1\]: the name 'a' is given twice",
        ),
        (
            {"speakers": [{"name": "a", "voiceprint": [1.0]}, {"name": "b", "voiceprint": [1, 0]}]},
            r"voiceprints of \[1, 2\] numbers",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_the_entry(document: object, why: str) -> None:
    with pytest.raises(ValueError, match=why) as refused:
        read_speakers(document, "ASR_SPEAKERS=x.json")
    assert str(refused.value).startswith("ASR_SPEAKERS=x.json: ")
    assert "\n" not in str(refused.value)


def test_at_most_a_thousand_speakers(tmp_path: Path) -> None:
    entries = [{"name": f"s{n}", "voiceprint": [1.0]} for n in range(MAX_SERVER_SPEAKERS + 1)]
    with pytest.raises(ValueError, match=f"at most {MAX_SERVER_SPEAKERS}"):
        load_speakers(write(tmp_path, {"speakers": entries}))


def test_a_file_that_is_not_there_or_not_json_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read it"):
        load_speakers(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(ValueError, match=f"ASR_SPEAKERS={bad}: not JSON"):
        load_speakers(str(bad))
