"""The audio the benchmarks send, and what the checksum engine answers to it.

The PCM is the gateway's (``gateway.audio.pcm``): 16 kHz mono int16. The checksum engine's
text is ``"<samples>:<crc32>"`` over every sample its stream has received so far, so that
each result can be checked against the audio that was sent (``checksum``).
"""

from __future__ import annotations

import io
import struct
import wave
import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gateway.audio.pcm import BYTES_PER_SAMPLE, BYTES_PER_SECOND, SAMPLE_RATE
from shared.messages import SAMPLES_PER_CHUNK_UNIT

Samples = npt.NDArray[np.int16]

FRAME_SAMPLES = SAMPLES_PER_CHUNK_UNIT  # 60 ms: FunASR's clients' frame, chunk_size's unit
FRAME_BYTES = FRAME_SAMPLES * BYTES_PER_SAMPLE
CHUNK_SAMPLES = 10 * FRAME_SAMPLES  # 600 ms: the model chunk of chunk_size [5, 10, 5]
CHUNK_BYTES = CHUNK_SAMPLES * BYTES_PER_SAMPLE
CHUNK_S = CHUNK_SAMPLES / SAMPLE_RATE
SPEECH_S, PAUSE_S = 3.0, 1.2  # synthetic speech with pauses: sentences, and what ends them


def checksum(pcm: bytes) -> str:
    """The checksum engine's text for a stream that has received ``pcm``."""
    return f"{len(pcm) // BYTES_PER_SAMPLE}:{zlib.crc32(pcm):08x}"


def expected_checksum(samples: Samples) -> str:
    return checksum(samples.astype("<i2").tobytes())


def wav_header(data_bytes: int) -> bytes:
    """A WAV header of the gateway's PCM declaring ``data_bytes`` of samples."""
    fmt = struct.pack("<HHIIHH", 1, 1, SAMPLE_RATE, BYTES_PER_SECOND, BYTES_PER_SAMPLE, 16)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", data_bytes)
    return b"RIFF" + struct.pack("<I", 4 + len(chunks) + data_bytes) + b"WAVE" + chunks


def wav_file(
    samples: np.ndarray, rate: int = SAMPLE_RATE, subtype: str = "PCM_16", fmt: str = "WAV"
) -> bytes:
    """``samples`` as a file libsndfile writes (any of its formats and subtypes)."""
    # Imported here: the device check's first step runs before soundfile's wheel is in.
    import soundfile

    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=fmt, subtype=subtype)
    return out.getvalue()


def load_audio(path: Path | None, seconds: float, seed: int, pauses: bool = False) -> Samples:
    """A 16 kHz mono int16 WAV, or speech-like synthetic audio of ``seconds`` (with
    ``pauses``, near-silent for PAUSE_S after every SPEECH_S)."""
    if path is not None:
        with wave.open(str(path), "rb") as wav:
            shape = (wav.getframerate(), wav.getnchannels(), wav.getsampwidth())
            if shape != (SAMPLE_RATE, 1, BYTES_PER_SAMPLE):
                raise SystemExit(f"{path}: need 16 kHz mono 16-bit PCM WAV")
            return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").copy()
    rng = np.random.default_rng(seed)
    t = np.arange(int(SAMPLE_RATE * seconds)) / SAMPLE_RATE
    voice = np.sin(2 * np.pi * (140 + 60 * np.sin(2 * np.pi * 0.7 * t)) * t)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 0.25 * t) ** 2
    noise = np.full(t.size, 800.0)
    if pauses:
        speaking = (t % (SPEECH_S + PAUSE_S)) < SPEECH_S
        envelope = np.where(speaking, envelope, 0.0)
        noise = np.where(speaking, noise, 20.0)
    signal: npt.NDArray[np.float64] = voice * envelope * 9000 + rng.normal(0, 1, t.size) * noise
    return signal.astype(np.int16)


def clips(count: int, seconds: float, mixed: bool = False) -> list[np.ndarray]:
    """Utterances of a tone with noise, each of ``seconds`` (``mixed``: 0.5 to 1.5 times)."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(count):
        length = seconds * (0.5 + rng.random()) if mixed else seconds
        t = np.arange(int(length * SAMPLE_RATE)) / SAMPLE_RATE
        tone = 3000 * np.sin(2 * np.pi * (200 + 30 * i) * t)
        out.append((tone + 1500 * rng.standard_normal(t.size)).astype(np.int16))
    return out


def speech_and_pauses(seconds: float, seed: int) -> np.ndarray:
    """Alternating 1.5 s of tone-and-noise and 1 s of near-silence."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    loud = (t % 2.5) < 1.5
    signal = np.where(
        loud,
        9000 * np.sin(2 * np.pi * 220 * t) + 1500 * rng.standard_normal(t.size),
        30 * rng.standard_normal(t.size),
    )
    return signal.astype(np.int16)


def chunks_of_tone(seed: int) -> np.ndarray:
    """3 to 8 model chunks of a tone with noise and a part of one more: streams of
    different lengths, whose chunks emit different numbers of tokens."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9)) * CHUNK_SAMPLES + int(rng.integers(0, CHUNK_SAMPLES))
    t = np.arange(n) / SAMPLE_RATE
    tone = 3000 * (1 + seed % 3) * np.sin(2 * np.pi * (150 + 40 * (seed % 10)) * t)
    return (tone + 1500 * rng.standard_normal(n)).astype(np.int16)
