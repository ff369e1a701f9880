"""The client side of FunASR's WebSocket protocol, sans I/O: frames in, events out.

The parser owns no socket and no task; the session feeds it each frame it reads and acts on
the events it returns. Every fault in the client's input is raised as a ``ProtocolError``
(close 1008) or a ``FrameTooLargeError`` (close 1009), and leaves the parser ``FAILED``.

A text frame is read field by field, as FunASR's Python server reads it (@3c58cb5), never
as "a config" or "an end": ``is_speaking: false`` (or ``is_finished: true``, the C++
server's, or ``is_end: true``) ends the input whatever else the frame holds, and
``is_end: true`` asks for the end-of-input acknowledgement. The config fields a frame
carries update the session; in the middle of an utterance only those that can change under
a running stream take effect at once (``LIVE_FIELDS``), the rest from the next utterance.
An end with nothing open is no error: it is acknowledged if it asks to be, and that is all
(FunASR's clients send a second end on close, and an HTML5 page may press Stop twice).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from typing import Literal, TypeGuard, TypeVar

from gateway.resample import MAX_AUDIO_FS, MIN_AUDIO_FS
from shared.errors import FrameTooLargeError, GatewayError, ProtocolError
from shared.messages import (
    MAX_HOTWORD_CHARS,
    MAX_HOTWORDS,
    MAX_HOTWORDS_BYTES,
    SAMPLE_RATE,
    SAMPLES_PER_CHUNK_UNIT,
    StreamOptions,
)

Mode = Literal["online", "offline", "2pass"]
T = TypeVar("T")
_MODES: dict[str, Mode] = {"online": "online", "offline": "offline", "2pass": "2pass"}

BYTES_PER_SAMPLE = 2  # signed 16-bit little-endian PCM
MAX_CHUNK_UNITS = 100
MAX_CHUNK_INTERVAL = 1000
MAX_LOOK_BACK = 100
MAX_WAV_NAME_CHARS = 256
MAX_RESUME_TOKEN_CHARS = 256

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
    itn: bool = True  # accepted; Paraformer models have no ITN (FunASR's Python server too)
    # Ours, opt-in: a result for every model chunk, even with empty text, so that a
    # benchmark can time each chunk by its ``seq``.
    timing: bool = False
    # Ours, opt-in (gateway.resume): the session survives a dropped connection.
    resumable: bool = False

    def stream_options(self) -> StreamOptions:
        return StreamOptions(
            chunk_size=self.chunk_size,
            encoder_chunk_look_back=self.encoder_chunk_look_back,
            decoder_chunk_look_back=self.decoder_chunk_look_back,
            hotwords=self.hotwords,
        )

    @property
    def chunk_bytes(self) -> int:
        """Bytes of PCM in one model chunk: ``chunk_size[1]`` x 60 ms."""
        return self.chunk_size[1] * SAMPLES_PER_CHUNK_UNIT * BYTES_PER_SAMPLE


@dataclass(frozen=True, slots=True)
class ConfigReceived:
    """A new utterance starts with ``config``."""

    config: SessionConfig


@dataclass(frozen=True, slots=True)
class ConfigUpdated:
    """Mid-utterance, ``LIVE_FIELDS`` changed: ``config`` is the utterance's from now on."""

    config: SessionConfig


@dataclass(frozen=True, slots=True)
class AudioReceived:
    pcm: bytes  # always a whole number of samples, never empty


@dataclass(frozen=True, slots=True)
class EndOfUtterance:
    """The utterance's input is over; ``acknowledge``: the client asked (``is_end``) for
    the end-of-input acknowledgement after the utterance's last result."""

    acknowledge: bool = False


@dataclass(frozen=True, slots=True)
class EndWithoutUtterance:
    """An end with no utterance open: owed nothing but the acknowledgement, if asked for.
    ``config`` is the session's settings now, for the acknowledgement's mode and name."""

    acknowledge: bool
    config: SessionConfig


@dataclass(frozen=True, slots=True)
class ResumeRequested:
    """A connection's first frame asks to resume a parked session (ours, opt-in):
    ``{"resume": TOKEN, "last_result": K}``."""

    token: str
    last_result: int


Event = (
    ConfigReceived
    | ConfigUpdated
    | AudioReceived
    | EndOfUtterance
    | EndWithoutUtterance
    | ResumeRequested
)

# The config fields; a frame carrying any of them (or is_speaking: true) sets them.
CONFIG_KEYS = frozenset(field.name for field in dataclass_fields(SessionConfig))
# Those that can change under a running stream: the name results carry, and the hotwords of
# the offline decodes still to come (a 2pass utterance's next sentences, an offline end).
# mode, chunk_size, audio_fs and the rest shape the stream already running: a frame that
# carries them mid-utterance (FunASR's HTML5 page repeats them in its Stop frame) sets
# them for the next utterance.
LIVE_FIELDS = ("wav_name", "hotwords")


class ParserState(enum.Enum):
    AWAITING_CONFIG = enum.auto()
    STREAMING = enum.auto()
    ENDED = enum.auto()
    FAILED = enum.auto()


def _is_int(value: object) -> TypeGuard[int]:
    # JSON true/false arrive as Python bools, which are ints; FunASR never means them as such.
    return isinstance(value, int) and not isinstance(value, bool)


# Every field check takes the field's name (for the message) and the raw JSON value.


def _int_in(low: int, high: int) -> Callable[[str, object], int]:
    def check(name: str, value: object) -> int:
        if not _is_int(value) or not low <= value <= high:
            raise ProtocolError(f"{name} must be an integer in {low}..{high}, got {value!r:.40}")
        return value

    return check


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"{name} must be a string")
    try:
        # A JSON "\ud800" escape parses to a lone surrogate, which could never be sent back.
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(f"{name} is not valid Unicode text") from None
    return value


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"{name} must be true or false")
    return value


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
    units = [p for p in parts if _is_int(p) and 0 <= p <= MAX_CHUNK_UNITS]
    if len(parts) != 3 or len(units) != 3:
        raise ProtocolError(
            f"{name} must be three integers in 0..{MAX_CHUNK_UNITS}, got {value!r:.40}"
        )
    if units[1] < 1:
        raise ProtocolError(f"{name}[1] (the chunk length) must be at least 1")
    return (units[0], units[1], units[2])


def _wav_name(name: str, value: object) -> str:
    wav_name = _text(name, value)
    if len(wav_name) > MAX_WAV_NAME_CHARS:
        raise ProtocolError(f"{name} is longer than {MAX_WAV_NAME_CHARS} characters")
    return wav_name


def _wav_format(name: str, value: object) -> str:
    # FunASR's HTML5 client sends "PCM" for WAV files, its Python client "pcm".
    if not isinstance(value, str) or value.lower() != "pcm":
        raise ProtocolError(f'{name} must be "pcm" (raw 16-bit PCM), got {value!r:.40}')
    return "pcm"


def _audio_fs(name: str, value: object) -> int:
    # FunASR's clients send a WAV file's own rate; the session resamples it to 16 kHz.
    if not (_is_int(value) and MIN_AUDIO_FS <= value <= MAX_AUDIO_FS):
        raise ProtocolError(
            f"{name}: PCM of {MIN_AUDIO_FS}..{MAX_AUDIO_FS} Hz is accepted"
            f" (resampled to {SAMPLE_RATE}), got {value!r:.40}"
        )
    return value


# FunASR's Python client joins its hotword file's words with commas; others use spaces.
# Also the full-width comma, the enumeration comma and the full-width semicolon.
_HOTWORD_SEPARATORS = re.compile("[\\s,;\uff0c\u3001\uff1b]+")


def parse_hotwords(name: str, value: object) -> tuple[str, ...]:
    """The words of a ``hotwords`` value, in either form FunASR's clients send: a JSON
    object string ``{"word": weight, ...}`` (the HTML5 page, the C++ client, funasr-client;
    also accepted as the object itself) or plain words separated by spaces or commas (the
    Python client). Weights are dropped: SeACo-Paraformer takes words only, and so FunASR's
    Python server would (it hands the raw string to funasr, which splits it at spaces).
    A multi-word key is split into its words, as funasr splits its hotword string."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("{"):
            try:
                value = json.loads(stripped, parse_constant=_refuse_constant)
            except (ValueError, RecursionError):
                value = stripped  # as the C++ server does: not JSON, so plain words
    if isinstance(value, dict):
        words_text = " ".join(str(key) for key in value)
    elif isinstance(value, str):
        words_text = value
    else:
        raise ProtocolError(f'{name} must be a string: words, or a JSON object {{"word": weight}}')
    _text(name, words_text)
    words = tuple(dict.fromkeys(word for word in _HOTWORD_SEPARATORS.split(words_text) if word))
    if len(words) > MAX_HOTWORDS:
        raise ProtocolError(f"{name}: at most {MAX_HOTWORDS} hotwords, got {len(words)}")
    too_long = next((word for word in words if len(word) > MAX_HOTWORD_CHARS), None)
    if too_long is not None:
        raise ProtocolError(
            f"{name}: a hotword is at most {MAX_HOTWORD_CHARS} characters, got {too_long!r:.40}"
        )
    if len(" ".join(words).encode("utf-8")) > MAX_HOTWORDS_BYTES:
        raise ProtocolError(f"{name}: at most {MAX_HOTWORDS_BYTES} bytes of UTF-8 in all")
    return words


def parse_config(fields: Mapping[str, object], base: SessionConfig | None = None) -> SessionConfig:
    """Validate a config message's fields; those it omits keep their value in ``base``.

    Raises ``ProtocolError`` naming the first bad field.
    """
    old = base if base is not None else SessionConfig()

    def pick(name: str, check: Callable[[str, object], T], default: T) -> T:
        return check(name, fields[name]) if name in fields else default

    look_back = _int_in(0, MAX_LOOK_BACK)
    return SessionConfig(
        mode=pick("mode", _mode, old.mode),
        chunk_size=pick("chunk_size", _chunk_size, old.chunk_size),
        chunk_interval=pick("chunk_interval", _int_in(1, MAX_CHUNK_INTERVAL), old.chunk_interval),
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
        itn=pick("itn", _bool, old.itn),
        timing=pick("timing", _bool, old.timing),
        resumable=pick("resumable", _bool, old.resumable),
    )


class ProtocolParser:
    """Parses one connection's frames into events, enforcing FunASR's message order.

    A connection carries one or more utterances, each a config, audio, and an end message.
    Omitted config fields keep the previous utterance's values, as in FunASR's servers.
    """

    def __init__(self, max_frame_bytes: int = 1 << 20, max_text_bytes: int = 65536) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.max_text_bytes = max_text_bytes
        self.state = ParserState.AWAITING_CONFIG
        self.config: SessionConfig | None = None  # the current (or last ended) utterance's
        # What the next utterance starts from: the last config, with the fields frames have
        # set since (mid-utterance, or with an end that had nothing open).
        self.next_config = SessionConfig()
        self.bytes_received = 0  # in the current (or last ended) utterance
        self._odd_byte = b""  # the first half of a sample split across frames

    @property
    def session_config(self) -> SessionConfig:
        """The settings in force: the open utterance's, else what the next one starts from."""
        if self.state is ParserState.STREAMING and self.config is not None:
            return self.config
        return self.next_config

    @property
    def samples_taken(self) -> int:
        """Whole samples of the current (or last ended) utterance's audio parsed so far."""
        return self.bytes_received // 2

    def reconnected(self) -> None:
        """A resumed connection: the first half of a sample that the old connection's last
        frame left is dropped, since the client resends from the last whole sample."""
        self.bytes_received -= len(self._odd_byte)
        self._odd_byte = b""

    def receive_text(self, text: str) -> list[Event]:
        self._check_usable()
        try:
            return self._receive_text(text)
        except GatewayError:
            self.state = ParserState.FAILED
            raise

    def receive_bytes(self, data: bytes) -> list[Event]:
        self._check_usable()
        try:
            return self._receive_bytes(data)
        except GatewayError:
            self.state = ParserState.FAILED
            raise

    def _check_usable(self) -> None:
        if self.state is ParserState.FAILED:
            raise ProtocolError("the connection already broke the protocol")

    def _receive_text(self, text: str) -> list[Event]:
        # Every UTF-8 character is 1 to 4 bytes: most frames are settled without encoding.
        if len(text) > self.max_text_bytes or (
            len(text) * 4 > self.max_text_bytes
            and len(text.encode("utf-8", "surrogatepass")) > self.max_text_bytes
        ):
            raise FrameTooLargeError(f"text frame larger than {self.max_text_bytes} bytes of UTF-8")
        try:
            fields = json.loads(text, parse_constant=_refuse_constant)
        except RecursionError:
            raise ProtocolError("text frame is JSON nested too deeply") from None
        except ValueError as exc:  # JSONDecodeError, and too many digits for an int
            raise ProtocolError(f"text frame is not valid JSON: {exc}") from None
        if not isinstance(fields, dict):
            raise ProtocolError("text frame is not a JSON object")
        return self._receive_object(fields)

    def _receive_object(self, fields: dict[str, object]) -> list[Event]:
        if "resume" in fields:
            return [self._resume(fields)]
        is_speaking, is_finished, is_end = (
            _bool(name, fields[name]) if name in fields else None
            for name in ("is_speaking", "is_finished", "is_end")
        )
        ends = is_speaking is False or is_finished is True or is_end is True
        acknowledge = is_end is True
        sets_config = not CONFIG_KEYS.isdisjoint(fields)
        if self.state is ParserState.STREAMING:
            events: list[Event] = []
            if sets_config:
                update = self._update_utterance(fields)
                if update is not None:
                    events.append(update)
            if ends:
                events.append(self._end_utterance(acknowledge))
            return events  # is_speaking: true, or unknown fields only: nothing to do
        if ends:
            if sets_config:
                self.next_config = parse_config(fields, self.next_config)
            return [EndWithoutUtterance(acknowledge, self.next_config)]
        if is_speaking is True or sets_config:
            return [self._start_utterance(fields)]
        raise ProtocolError("text frame is neither a config nor an end message")

    def _resume(self, fields: dict[str, object]) -> ResumeRequested:
        if self.state is not ParserState.AWAITING_CONFIG or self.config is not None:
            raise ProtocolError("a resume must be a connection's first frame")
        token = _text("resume", fields["resume"])
        if len(token) > MAX_RESUME_TOKEN_CHARS:
            raise ProtocolError(f"resume: a token is at most {MAX_RESUME_TOKEN_CHARS} characters")
        last_result = _int_in(0, 2**53)("last_result", fields.get("last_result", 0))
        return ResumeRequested(token, last_result)

    def _start_utterance(self, fields: dict[str, object]) -> ConfigReceived:
        config = parse_config(fields, self.next_config)
        self.config = self.next_config = config
        self.state = ParserState.STREAMING
        self.bytes_received = 0
        return ConfigReceived(config)

    def _update_utterance(self, fields: dict[str, object]) -> ConfigUpdated | None:
        """Every field is checked and kept for the next utterance; ``LIVE_FIELDS`` also
        take effect now."""
        assert self.config is not None
        self.next_config = parse_config(fields, self.next_config)
        live = {name: getattr(self.next_config, name) for name in LIVE_FIELDS if name in fields}
        updated = replace(self.config, **live)
        if updated == self.config:
            return None
        self.config = updated
        return ConfigUpdated(updated)

    def _end_utterance(self, acknowledge: bool) -> EndOfUtterance:
        if self._odd_byte:
            raise ProtocolError("the audio ended in the middle of a 16-bit sample")
        self.state = ParserState.ENDED
        return EndOfUtterance(acknowledge)

    def _receive_bytes(self, data: bytes) -> list[Event]:
        if self.state is ParserState.AWAITING_CONFIG:
            raise ProtocolError("audio before the config message")
        if self.state is ParserState.ENDED:
            raise ProtocolError("audio after the end of the utterance; send a new config first")
        if len(data) > self.max_frame_bytes:
            raise FrameTooLargeError(f"binary frame larger than {self.max_frame_bytes} bytes")
        self.bytes_received += len(data)
        pcm = self._odd_byte + data if self._odd_byte else bytes(data)
        if len(pcm) % 2:
            self._odd_byte = pcm[-1:]
            pcm = pcm[:-1]
        else:
            self._odd_byte = b""
        return [AudioReceived(pcm)] if pcm else []


def _refuse_constant(name: str) -> object:
    # Python's json takes NaN and Infinity; they are not JSON and no config field needs them.
    raise ValueError(f"{name} is not a JSON value")
