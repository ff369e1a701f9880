"""What one client may cost the others, per session, sans I/O (the caller passes the time).

Frames are counted in a bucket holding a second's worth (``gateway.ratelimit``,
ASR_MAX_FRAMES_PER_SECOND); the audio of the whole session is bounded
(ASR_MAX_SESSION_SECONDS); and the next frame is due within ASR_IDLE_TIMEOUT unless the
client is owed a result, the first config within ASR_CONFIG_TIMEOUT of the start, each
config's first audio within ASR_FIRST_AUDIO_TIMEOUT. Every breach is a ``ProtocolError``
(1008).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.protocol import AudioReceived, ConfigReceived, EndOfUtterance, Event, ParserState
from gateway.ratelimit import TokenBucket, frame_cost
from gateway.resample import resampled_bytes
from gateway.settings import GatewaySettings
from shared.errors import ProtocolError


@dataclass(frozen=True, slots=True)
class Deadline:
    """When the client's next frame is due (``math.inf``: no limit), and why if it is late."""

    at: float
    why: str  # the ProtocolError's message


class SessionLimits:
    def __init__(self, settings: GatewaySettings, now: float) -> None:
        self._settings = settings
        rate = settings.max_frames_per_s
        self._started = now
        self._frames = TokenBucket(rate, max(1.0, rate), now)
        self._audio_bytes = 0
        self._configured_at: float | None = None  # the last config, until its first audio

    def frame(self, size: int | None, audio_fs: int, now: float) -> None:
        """One frame of ``size`` bytes at ``audio_fs`` (None: text) against the frame cap."""
        if size is not None:
            size = resampled_bytes(size, audio_fs)
        if not self._frames.take(frame_cost(size), now):
            raise ProtocolError(
                f"more than {self._settings.max_frames_per_s:g} frames a second"
                " (ASR_MAX_FRAMES_PER_SECOND); send audio in frames of 20 ms or more"
            )

    def event(self, event: Event, audio_fs: int, now: float) -> None:
        """What a parsed event starts or spends: a config's wait for audio, the session's
        audio."""
        match event:
            case ConfigReceived():
                self._configured_at = now
            case AudioReceived(pcm=pcm):
                self._configured_at = None
                self._audio_bytes += resampled_bytes(len(pcm), audio_fs)
                if self._audio_bytes > self._settings.max_session_bytes:
                    raise ProtocolError(
                        f"the session sent more than {self._settings.max_session_s:g} s"
                        " of audio (ASR_MAX_SESSION_SECONDS)"
                    )
            case EndOfUtterance():
                self._configured_at = None  # an empty utterance: nothing more is due
            case _:
                pass

    def next_frame(self, state: ParserState, owed: bool, now: float) -> Deadline:
        """When the next frame is due; ``owed``: the client waits for a result of ours
        after its end, so it may be silent for as long as that takes."""
        settings = self._settings
        idle = settings.idle_timeout_s
        deadline = Deadline(
            math.inf if owed else now + idle,
            f"no frame from the client for {idle:g} s (ASR_IDLE_TIMEOUT)",
        )
        if state is ParserState.AWAITING_CONFIG:
            due = self._started + settings.config_timeout_s
            if due < deadline.at:
                wait = settings.config_timeout_s
                deadline = Deadline(due, f"no config within {wait:g} s (ASR_CONFIG_TIMEOUT)")
        elif self._configured_at is not None:
            due = self._configured_at + settings.first_audio_timeout_s
            if due < deadline.at:
                wait = settings.first_audio_timeout_s
                deadline = Deadline(
                    due, f"no audio within {wait:g} s of the config (ASR_FIRST_AUDIO_TIMEOUT)"
                )
        return deadline
