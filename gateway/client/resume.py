"""A client's side of resumable sessions (the opt-in ``"resumable": true`` protocol), sans I/O.

Frames in, events out: ``ResumeTracker.feed`` keeps the resume token, the highest
``result_id`` seen (to drop what a resumed server sends again) and the newest ack, and
says, when a resumed session opens, which audio to send again. ``gateway.client`` does the
sockets; this module only decides.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from shared.errors import CLOSE_RESUME_THROTTLED

Message = Mapping[str, object]
T = TypeVar("T")

# Closed without our error frame and with one of these (None: no close frame came, 1006):
# the connection was lost, not the session. Anything else (the refusals 44xx, a policy
# close 1008, a draining server's 1012, 1013) is the server's decision, which a retry would
# only meet again.
DROPPED_CLOSE_CODES = frozenset({None, 1000, 1001, 1006, 1011})
# A resume refused for now, with the session still held: the same token, after a backoff.
RETRY_LATER_CLOSE_CODES = frozenset({CLOSE_RESUME_THROTTLED})

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0


class ProtocolViolation(ValueError):
    """A frame that the resume protocol does not allow here."""


@dataclass(frozen=True, slots=True)
class SessionFrame:
    """The server's ``{"type": "session", ...}`` frame."""

    session_id: str
    resume_token: str
    resume_window_s: float
    resumed: bool
    utterance: int  # 1-based count of configs the session has taken
    samples: int  # of that utterance's audio, taken by the server
    input_ended: bool  # whether the server has taken that utterance's end frame
    last_result: int  # the highest result_id the server has issued

    @classmethod
    def parse(cls, message: Message) -> SessionFrame:
        try:
            return cls(
                session_id=_typed(message, "id", str),
                resume_token=_typed(message, "resume_token", str),
                resume_window_s=float(_number(message, "resume_window_s")),
                resumed=_typed(message, "resumed", bool),
                utterance=_count(message, "utterance"),
                samples=_count(message, "samples"),
                input_ended=_typed(message, "input_ended", bool),
                last_result=_count(message, "last_result"),
            )
        except (KeyError, TypeError) as exc:
            raise ProtocolViolation(f"a session frame with a bad field: {exc}") from None


@dataclass(frozen=True, slots=True)
class Resend:
    """What to send on a resumed connection: the PCM from ``from_byte`` on, then the end
    frame if ``send_end`` (never the config again)."""

    from_byte: int
    send_end: bool


@dataclass(frozen=True, slots=True)
class SessionOpened:
    frame: SessionFrame
    resend: Resend | None  # None on the session's first connection: send everything


@dataclass(frozen=True, slots=True)
class Acked:
    utterance: int
    samples: int


@dataclass(frozen=True, slots=True)
class Duplicate:
    result_id: int


@dataclass(frozen=True, slots=True)
class Result:
    message: Message  # a result or end acknowledgement not seen before: deliver it


Event = SessionOpened | Acked | Duplicate | Result


class ResumeTracker:
    """The protocol's bookkeeping for one utterance of ``audio_samples`` samples (the only
    one ``gateway.client`` sends: utterance 1)."""

    UTTERANCE = 1

    def __init__(self, audio_samples: int) -> None:
        self.audio_samples = audio_samples
        self.token: str | None = None
        self.window_s = 0.0
        self.last_result = 0
        self.acked = Acked(self.UTTERANCE, 0)
        self.resumes = 0
        self.duplicates = 0

    @property
    def can_resume(self) -> bool:
        return self.token is not None

    def feed(self, message: Message) -> Event:
        """Classify one text frame (not an error frame: those end the session)."""
        match message.get("type"):
            case "session":
                return self._opened(SessionFrame.parse(message))
            case "ack":
                return self._acked(message)
        result_id = message.get("result_id")
        if isinstance(result_id, int) and not isinstance(result_id, bool):
            if result_id <= self.last_result:
                self.duplicates += 1
                return Duplicate(result_id)
            self.last_result = result_id
        return Result(message)

    def resume_url(self, url: str) -> str:
        """``url`` with ``resume=<token>&last_result=<K>`` added to its query (any earlier
        pair of those replaced; the rest of the query kept as it was)."""
        if self.token is None:
            raise ProtocolViolation("no session frame has come: nothing to resume")
        parts = urlsplit(url)
        kept = [
            (key, value)
            for key, value in parse_qsl(parts.query, keep_blank_values=True)
            if key not in ("resume", "last_result")
        ]
        query = urlencode([*kept, ("resume", self.token), ("last_result", str(self.last_result))])
        return urlunsplit(parts._replace(query=query))

    def _opened(self, frame: SessionFrame) -> SessionOpened:
        resend = None
        if frame.resumed:
            if self.token is None:
                raise ProtocolViolation("a resumed session frame on a session never opened")
            if frame.utterance != self.UTTERANCE:
                raise ProtocolViolation(
                    f"the server resumed utterance {frame.utterance}; this client sent one"
                )
            if frame.samples > self.audio_samples:
                raise ProtocolViolation(
                    f"the server says it took {frame.samples} samples of {self.audio_samples}"
                )
            resend = Resend(from_byte=2 * frame.samples, send_end=not frame.input_ended)
            self.resumes += 1
        self.token = frame.resume_token  # each token works once: keep the newest
        self.window_s = frame.resume_window_s
        self.acked = Acked(frame.utterance, frame.samples)
        return SessionOpened(frame, resend)

    def _acked(self, message: Message) -> Acked:
        try:
            acked = Acked(_count(message, "utterance"), _count(message, "samples"))
        except (KeyError, TypeError) as exc:
            raise ProtocolViolation(f"an ack frame with a bad field: {exc}") from None
        self.acked = acked
        return acked


def is_dropped(close_code: int | None) -> bool:
    """Whether a close that came without our error frame lost only the connection."""
    return close_code in DROPPED_CLOSE_CODES


def is_retry_later(close_code: int | None) -> bool:
    """Whether a refused resume may come again with the same token, after a backoff."""
    return close_code in RETRY_LATER_CLOSE_CODES


def backoff_delays(
    first_s: float = FIRST_BACKOFF_S,
    cap_s: float = MAX_BACKOFF_S,
    uniform: Callable[[], float] = random.random,
) -> Iterator[float]:
    """Waits between reconnects: doubling from ``first_s`` up to ``cap_s``, each drawn from
    its upper half so that clients cut off together do not come back together."""
    base = first_s
    while True:
        yield base * (0.5 + 0.5 * uniform())
        base = min(2 * base, cap_s)


def _typed(message: Message, key: str, kind: type[T]) -> T:
    value = message[key]
    if not isinstance(value, kind):
        raise TypeError(f"{key}={value!r}")
    return value


def _number(message: Message, key: str) -> int | float:
    value = message[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{key}={value!r}")
    return value


def _count(message: Message, key: str) -> int:
    value = message[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError(f"{key}={value!r}")
    return value
