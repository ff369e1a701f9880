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
from dataclasses import dataclass, replace

from gateway.funasr.config import CONFIG_KEYS, LIVE_FIELDS, SessionConfig, parse_config
from gateway.funasr.fields import int_in, read_bool, read_text, refuse_constant
from shared.errors import FrameTooLargeError, GatewayError, ProtocolError

MAX_RESUME_TOKEN_CHARS = 256


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


class ParserState(enum.Enum):
    AWAITING_CONFIG = enum.auto()
    STREAMING = enum.auto()
    ENDED = enum.auto()
    FAILED = enum.auto()


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
            fields = json.loads(text, parse_constant=refuse_constant)
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
            read_bool(name, fields[name]) if name in fields else None
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
        token = read_text("resume", fields["resume"])
        if len(token) > MAX_RESUME_TOKEN_CHARS:
            raise ProtocolError(f"resume: a token is at most {MAX_RESUME_TOKEN_CHARS} characters")
        last_result = int_in(0, 2**53)("last_result", fields.get("last_result", 0))
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
