"""gateway.ops.enrol's arguments, without a pool (the whole command runs in
tests/live/gateway/test_speakers_live.py, whose server starts with the file it writes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.funasr.known_speakers import EnrolmentError
from gateway.ops.enrol import main, named_clips


def test_clips_are_named_as_the_server_names_them() -> None:
    assert named_clips(["alice=a.wav", " bob =dir/b=c.wav"]) == [
        ("alice", Path("a.wav")),
        ("bob", Path("dir/b=c.wav")),
    ]
    for bad, why in [
        (["a.wav"], "not NAME=CLIP.wav"),
        (["alice="], "not NAME=CLIP.wav"),
        (["=a.wav"], "printable characters"),
        (["alice=a.wav", "alice=b.wav"], "each name is given once"),
    ]:
        with pytest.raises(EnrolmentError, match=why):
            named_clips(bad)


def test_without_a_speaker_model_it_says_how_to_name_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("ASR_SPEAKER_MODEL", raising=False)
    assert main([str(tmp_path / "out.json"), "alice=a.wav"]) == 2
    assert "pass --model or set ASR_SPEAKER_MODEL" in capsys.readouterr().err


def test_a_clip_that_is_not_a_reference_is_one_line_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    clip = tmp_path / "a.wav"
    clip.write_bytes(b"RIFF, but not a WAV")
    out = tmp_path / "out.json"
    assert main([str(out), f"alice={clip}", "--model", "synthetic-campplus:tiny"]) == 1
    assert capsys.readouterr().err.startswith(f"enrol: {clip}: ")
    assert not out.exists()
