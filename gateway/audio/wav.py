"""A whole WAV file's bytes as 16 kHz mono int16: a file of ``POST /v1/transcribe`` and a
known speaker's reference clip (an OpenAI request's, a FunASR config's, the enrolment
command's) are decoded here, so that a clip gives the same samples, and so the same
voiceprint, whichever way it came.

The header (rate, channels, encoding, duration) is checked before any sample is read, so
that what is allocated after is bounded by the file's size and the caller's limit. A
refusal is a :class:`WavError` whose ``reason`` the file path turns into its status.
"""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt

from gateway.audio.pcm import MAX_AUDIO_FS, MIN_AUDIO_FS
from gateway.audio.resample import to_pcm16
from shared.messages import SAMPLE_RATE

MAX_CHANNELS = 8
# At least a byte a sample: what is read stays within a few times the file's size.
# (IMA ADPCM or GSM would decode to 8 or 20 float32 bytes per byte of file.)
SUBTYPES = frozenset(
    {"PCM_S8", "PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE", "ULAW", "ALAW"}
)
BLOCK_FRAMES = 1 << 16  # mixed to mono a block at a time: no frames x channels array


class WavError(ValueError):
    """Audio that is not a WAV file this decodes: ``reason`` is ``bad_wav`` (empty,
    truncated, corrupt, no samples), ``not_wav`` (another format or encoding), ``bad_rate``,
    ``too_many_channels`` or ``too_long``; ``message`` says what, for the client."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def wav_seconds(data: bytes) -> float | None:
    """The audio's length by its header alone (None where soundfile reads no header)."""
    import soundfile

    try:
        info = soundfile.info(io.BytesIO(data))
    except (RuntimeError, soundfile.LibsndfileError):
        return None
    return float(info.frames / info.samplerate) if info.samplerate > 0 else None


def decode_wav(data: bytes, max_seconds: float) -> npt.NDArray[np.int16]:
    """WAV bytes -> 16 kHz mono int16. Blocking (soundfile, soxr): call it in a thread.

    The header (rate, channels, encoding, duration) is checked before any sample is read:
    what is allocated after is bounded by the file's size and ``max_seconds``.
    """
    import soundfile

    if not data:
        raise WavError("bad_wav", "the audio is empty")
    try:
        info = soundfile.info(io.BytesIO(data))
    except (RuntimeError, soundfile.LibsndfileError):
        if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
            raise WavError("bad_wav", "the WAV file is truncated or corrupt") from None
        raise WavError("not_wav", "the audio is not a WAV file; send WAV (RIFF/WAVE)") from None
    if info.format not in ("WAV", "WAVEX"):
        raise WavError("not_wav", f"the audio is {info.format}, not WAV; send WAV")
    if info.subtype not in SUBTYPES:
        raise WavError("not_wav", f"the WAV holds {info.subtype}; send PCM, float, u-law or A-law")
    rate = int(info.samplerate)
    if not MIN_AUDIO_FS <= rate <= MAX_AUDIO_FS:
        raise WavError(
            "bad_rate",
            f"the WAV declares a sample rate of {rate} Hz;"
            f" {MIN_AUDIO_FS} to {MAX_AUDIO_FS} Hz are taken",
        )
    if info.channels > MAX_CHANNELS:
        raise WavError(
            "too_many_channels",
            f"the WAV has {info.channels} channels; at most {MAX_CHANNELS} are taken",
        )
    if info.frames / rate > max_seconds:
        raise WavError(
            "too_long",
            f"the audio lasts {info.frames / rate:.0f} s, more than"
            f" {max_seconds:g} s (ASR_MAX_SESSION_SECONDS)",
        )
    try:
        return _decode_to_16k(data, info.frames, rate)
    except (RuntimeError, soundfile.LibsndfileError) as exc:
        raise WavError("bad_wav", f"the WAV file is truncated or corrupt: {exc}") from None


def _decode_to_16k(data: bytes, frames: int, rate: int) -> npt.NDArray[np.int16]:
    """The file's samples mixed to mono, resampled and rounded a block at a time, into the
    one int16 array of the answer: the most held at once is that array and a block (it was
    the float32 file, its float32 resampling and the answer: 11-12 times an 8 kHz u-law
    file's size). soxr's stream in float32 gives what one resampling of the whole gives."""
    import soundfile
    import soxr

    out = np.empty(frames * SAMPLE_RATE // rate + 64, dtype=np.int16)
    filled = 0
    stream = None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, "float32")

    def put(samples: npt.NDArray[np.float32]) -> None:
        nonlocal filled
        pcm = np.frombuffer(to_pcm16(samples), dtype="<i2")
        out[filled : filled + len(pcm)] = pcm
        filled += len(pcm)

    read = 0
    with soundfile.SoundFile(io.BytesIO(data)) as sound:
        for block in sound.blocks(BLOCK_FRAMES, dtype="float32", always_2d=True):
            count = min(len(block), frames - read)
            mixed = block[:count, 0] if block.shape[1] == 1 else block[:count].mean(axis=1)
            read += count
            put(mixed if stream is None else stream.resample_chunk(mixed))
    if read == 0:
        raise WavError("bad_wav", "the WAV file holds no samples")
    if stream is not None:
        put(stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
    return out[:filled]
