"""A FunASR session's config: what a config frame sets (``SessionConfig``), each field checked
as FunASR's clients send it (``parse_config``), and which fields a frame may change
mid-utterance (``LIVE_FIELDS``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Literal, TypeVar

from gateway.audio.pcm import BYTES_PER_SAMPLE, MAX_AUDIO_FS, MIN_AUDIO_FS
from gateway.funasr.corrections import split_hotwords
from gateway.funasr.fields import int_in, is_int, read_bool, read_text
from gateway.funasr.hotwords import parse_hotwords
from gateway.funasr.known_speakers import (
    MAX_KNOWN_SPEAKERS,
    EnrolmentError,
    ReferenceClip,
    check_names,
    check_pairs,
    clip_bytes,
    clip_seconds,
)
from shared.errors import ProtocolError
from shared.messages import SAMPLE_RATE, SAMPLES_PER_CHUNK_UNIT, SPOKEN_LANGUAGES, StreamOptions

Mode = Literal["online", "offline", "2pass"]
T = TypeVar("T")
_MODES: dict[str, Mode] = {"online": "online", "offline": "offline", "2pass": "2pass"}

MAX_CHUNK_UNITS = 100
MAX_CHUNK_INTERVAL = 1000
MAX_LOOK_BACK = 100
MAX_WAV_NAME_CHARS = 256
MAX_MODEL_CHARS = 64  # gateway.models.table.NAME_PATTERN

# int() alone would also take "+5", "1_0" and non-ASCII digits; FunASR's clients send none.
_CHUNK_PART = re.compile(r"\s*([0-9]{1,3})\s*")


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """One utterance's settings, as the client's config message gives them."""

    mode: Mode = "2pass"
    chunk_size: tuple[int, int, int] = (5, 10, 5)
    chunk_interval: int = 10
    encoder_chunk_look_back: int = 4
    decoder_chunk_look_back: int = 0
    wav_name: str = "microphone"
    wav_format: str = "pcm"
    audio_fs: int = SAMPLE_RATE
    # Words only, normalised from either form FunASR's clients send (``parse_hotwords``).
    hotwords: tuple[str, ...] = ()
    # Inverse text normalization of the offline results ("一百二十三" as "123"), as FunASR's
    # C++ server does it: on by default (its default), never on partials.
    itn: bool = True
    # SenseVoiceSmall's language and its own ITN (and punctuation), as the C++ server takes
    # them for its SenseVoice second pass, with its defaults; other models ignore them.
    svs_lang: str = "auto"
    svs_itn: bool = True
    # Ours, opt-in: a result for every model chunk, even with empty text, so that a
    # benchmark can time each chunk by its ``seq``.
    timing: bool = False
    # Ours, opt-in (gateway.session.resume.resumes): the session survives a dropped connection.
    resumable: bool = False
    # Ours: the served model to use (ASR_MODELS' names; None: the URL's ?model=, else the
    # default). FunASR's clients never send it.
    model: str | None = None
    # funasr-server's spk, for the offline mode: each sentence's speaker (CAM++), and the
    # speaker turns, on the offline result. Other modes refuse it.
    spk: bool = False
    # Ours, with spk: known speakers, as OpenAI's known_speaker_names[] and
    # known_speaker_references[] (gateway.funasr.known_speakers): up to 4 names, and as many
    # 2-10 s WAV clips (base64, or data URLs), kept decoded from base64 only, each with its
    # length by its header: what it costs is known before any work (the session's limits).
    spk_names: tuple[str, ...] = ()
    spk_refs: tuple[ReferenceClip, ...] = ()

    def stream_options(self) -> StreamOptions:
        return StreamOptions(
            chunk_size=self.chunk_size,
            encoder_chunk_look_back=self.encoder_chunk_look_back,
            decoder_chunk_look_back=self.decoder_chunk_look_back,
            hotwords=split_hotwords(self.hotwords)[0],  # its rules correct text, not decodes
            itn=self.itn,
            language=self.svs_lang,
            model_itn=self.svs_itn,
        )

    @property
    def chunk_bytes(self) -> int:
        """Bytes of PCM in one model chunk: ``chunk_size[1]`` x 60 ms."""
        return self.chunk_size[1] * SAMPLES_PER_CHUNK_UNIT * BYTES_PER_SAMPLE


# The config fields; a frame carrying any of them (or is_speaking: true) sets them.
CONFIG_KEYS = frozenset(field.name for field in dataclass_fields(SessionConfig))
# Those that can change under a running stream: the name results carry, and the hotwords of
# the offline decodes still to come (a 2pass utterance's next sentences, an offline end).
# mode, chunk_size, audio_fs and the rest shape the stream already running: a frame that
# carries them mid-utterance (FunASR's HTML5 page repeats them in its Stop frame) sets
# them for the next utterance. ``model`` takes effect at once too: the session switches
# before its first audio, or refuses (1008) after it (gateway.session.streams), rather
# than keep it silently for the next utterance.
LIVE_FIELDS = ("wav_name", "hotwords", "model")


def _mode(name: str, value: object) -> Mode:
    mode = _MODES.get(value) if isinstance(value, str) else None
    if mode is None:
        raise ProtocolError(f"{name} must be one of {', '.join(_MODES)}, got {value!r:.40}")
    return mode


def _chunk_size(name: str, value: object) -> tuple[int, int, int]:
    parts: list[object]
    if isinstance(value, str):
        matches = [_CHUNK_PART.fullmatch(part) for part in value.split(",")]
        parts = [int(match.group(1)) if match else None for match in matches]
    elif isinstance(value, list):
        parts = value
    else:
        raise ProtocolError(f'{name} must be a list of three integers or a string "a,b,c"')
    units = [p for p in parts if is_int(p) and 0 <= p <= MAX_CHUNK_UNITS]
    if len(parts) != 3 or len(units) != 3:
        raise ProtocolError(
            f"{name} must be three integers in 0..{MAX_CHUNK_UNITS}, got {value!r:.40}"
        )
    if units[1] < 1:
        raise ProtocolError(f"{name}[1] (the chunk length) must be at least 1")
    return (units[0], units[1], units[2])


def _wav_name(name: str, value: object) -> str:
    wav_name = read_text(name, value)
    if len(wav_name) > MAX_WAV_NAME_CHARS:
        raise ProtocolError(f"{name} is longer than {MAX_WAV_NAME_CHARS} characters")
    return wav_name


def _spoken_language(name: str, value: object) -> str:
    if value not in SPOKEN_LANGUAGES:
        languages = ", ".join(SPOKEN_LANGUAGES)
        raise ProtocolError(f"{name} must be one of {languages}, got {value!r:.40}")
    return str(value)


def _model(name: str, value: object) -> str:
    model = read_text(name, value)
    if not 0 < len(model) <= MAX_MODEL_CHARS:
        raise ProtocolError(f"{name} must be a model's name of 1 to {MAX_MODEL_CHARS} characters")
    return model


def _wav_format(name: str, value: object) -> str:
    # FunASR's HTML5 client sends "PCM" for WAV files, its Python client "pcm".
    if not isinstance(value, str) or value.lower() != "pcm":
        raise ProtocolError(f'{name} must be "pcm" (raw 16-bit PCM), got {value!r:.40}')
    return "pcm"


def _audio_fs(name: str, value: object) -> int:
    # FunASR's clients send a WAV file's own rate; the session resamples it to 16 kHz.
    if not (is_int(value) and MIN_AUDIO_FS <= value <= MAX_AUDIO_FS):
        raise ProtocolError(
            f"{name}: PCM of {MIN_AUDIO_FS}..{MAX_AUDIO_FS} Hz is accepted"
            f" (resampled to {SAMPLE_RATE}), got {value!r:.40}"
        )
    return value


def _text_list(name: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ProtocolError(f"{name} must be a list of strings")
    if len(value) > MAX_KNOWN_SPEAKERS:
        raise ProtocolError(f"{name}: at most {MAX_KNOWN_SPEAKERS} known speakers are taken")
    return value


def _spk_names(name: str, value: object) -> tuple[str, ...]:
    try:
        return check_names(_text_list(name, value), name)
    except EnrolmentError as error:
        raise ProtocolError(str(error)) from None


def _spk_refs(name: str, value: object) -> tuple[ReferenceClip, ...]:
    texts = _text_list(name, value)
    clips = []
    try:
        for index, text in enumerate(texts):
            data = clip_bytes(text, f"{name}[{index}]")
            # Its header only (2-10 s), as a file's is read before its samples.
            clips.append(ReferenceClip(data, clip_seconds(data, f"{name}[{index}]")))
    except EnrolmentError as error:
        raise ProtocolError(str(error)) from None
    return tuple(clips)


def parse_config(fields: Mapping[str, object], base: SessionConfig | None = None) -> SessionConfig:
    """Validate a config message's fields; those it omits keep their value in ``base``.

    Raises ``ProtocolError`` naming the first bad field.
    """
    old = base if base is not None else SessionConfig()

    def pick(name: str, check: Callable[[str, object], T], default: T) -> T:
        return check(name, fields[name]) if name in fields else default

    look_back = int_in(0, MAX_LOOK_BACK)
    config = SessionConfig(
        mode=pick("mode", _mode, old.mode),
        chunk_size=pick("chunk_size", _chunk_size, old.chunk_size),
        chunk_interval=pick("chunk_interval", int_in(1, MAX_CHUNK_INTERVAL), old.chunk_interval),
        encoder_chunk_look_back=pick(
            "encoder_chunk_look_back", look_back, old.encoder_chunk_look_back
        ),
        decoder_chunk_look_back=pick(
            "decoder_chunk_look_back", look_back, old.decoder_chunk_look_back
        ),
        wav_name=pick("wav_name", _wav_name, old.wav_name),
        wav_format=pick("wav_format", _wav_format, old.wav_format),
        audio_fs=pick("audio_fs", _audio_fs, old.audio_fs),
        hotwords=pick("hotwords", parse_hotwords, old.hotwords),
        itn=pick("itn", read_bool, old.itn),
        svs_lang=pick("svs_lang", _spoken_language, old.svs_lang),
        svs_itn=pick("svs_itn", read_bool, old.svs_itn),
        timing=pick("timing", read_bool, old.timing),
        resumable=pick("resumable", read_bool, old.resumable),
        model=pick("model", _model, old.model),
        spk=pick("spk", read_bool, old.spk),
        spk_names=pick("spk_names", _spk_names, old.spk_names),
        spk_refs=pick("spk_refs", _spk_refs, old.spk_refs),
    )
    try:
        check_pairs(config.spk_names, config.spk_refs, "spk_names and spk_refs")
    except EnrolmentError as error:
        raise ProtocolError(str(error)) from None
    return config
