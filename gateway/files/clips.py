"""A known speaker's reference clip, decoded as a file is (``decode_wav``): its length read
from its WAV header and held to 2-10 s before a sample is decoded. OpenAI's
``known_speaker_references[]`` (``gateway.openai_api.known_speakers``) and the enrolment
command that makes an ``ASR_SPEAKERS`` file (``gateway.ops.enrol``) decode them here, so
that a clip gives the same voiceprint either way."""

from __future__ import annotations

import io

import numpy as np
import numpy.typing as npt

from gateway.files.errors import TranscribeError
from gateway.files.request import decode_wav
from gateway.funasr.known_speakers import REFERENCE_MAX_S, EnrolmentError, check_clip_seconds


def wav_seconds(data: bytes) -> float | None:
    """The audio's length by its header alone (None where soundfile reads no header)."""
    import soundfile

    try:
        info = soundfile.info(io.BytesIO(data))
    except (RuntimeError, soundfile.LibsndfileError):
        return None
    return float(info.frames / info.samplerate) if info.samplerate > 0 else None


def clip_seconds(data: bytes, where: str, reason: str) -> float:
    """A clip's length by its header, held to 2-10 s before a sample is decoded; a 400
    whose ``reason`` is given and whose message starts with ``where`` otherwise."""
    seconds = wav_seconds(data)
    try:
        if seconds is None:  # no header soundfile reads: decode_wav says what is wrong
            decode_wav(data, REFERENCE_MAX_S)
            raise TranscribeError(400, reason, f"{where}: the clip has no WAV header")
        check_clip_seconds(seconds, where)
    except EnrolmentError as error:
        raise TranscribeError(400, reason, str(error)) from None
    except TranscribeError as error:
        raise _named(error, where, reason) from None
    return seconds


def decode_clip(data: bytes, where: str, reason: str) -> npt.NDArray[np.int16]:
    """A clip's 16 kHz mono samples (its length checked by ``clip_seconds`` first); a 400
    as there. Blocking (soundfile, soxr): call it in a thread."""
    clip_seconds(data, where, reason)
    try:
        return decode_wav(data, REFERENCE_MAX_S)
    except TranscribeError as error:
        raise _named(error, where, reason) from None


def _named(error: TranscribeError, where: str, reason: str) -> TranscribeError:
    if error.reason == reason:
        return error
    return TranscribeError(400, reason, f"{where}: {error.message}")
