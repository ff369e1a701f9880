from __future__ import annotations

import wave
from pathlib import Path

import pytest

from bench.common.net import free_port
from gateway.client import read_wav
from gateway.client.cli import main


def write_wav(path: Path, pcm: bytes, rate: int = 16000, channels: int = 1) -> Path:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm)
    return path


def test_read_wav_returns_the_pcm(tmp_path: Path) -> None:
    pcm = bytes(range(200))
    assert read_wav(write_wav(tmp_path / "a.wav", pcm)) == pcm


@pytest.mark.parametrize(("rate", "channels"), [(8000, 1), (16000, 2)])
def test_read_wav_refuses_other_formats(tmp_path: Path, rate: int, channels: int) -> None:
    path = write_wav(tmp_path / "a.wav", bytes(400), rate, channels)
    with pytest.raises(ValueError, match="16 kHz mono 16-bit"):
        read_wav(path)


def test_an_unusable_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "not.wav"
    path.write_bytes(b"RIFF nonsense")
    assert main([str(path)]) == 2
    assert "gateway.client:" in capsys.readouterr().err


def test_no_server_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_wav(tmp_path / "a.wav", bytes(3200))
    url = f"ws://127.0.0.1:{free_port()}/"
    assert main([str(path), "--url", url, "--fast"]) == 1
    assert f"cannot connect to {url}" in capsys.readouterr().err
