"""What one client may cost the others, per session, sans I/O (the caller passes the time).

Frames are counted in a bucket holding a second's worth (``gateway.limits.rate``,
ASR_MAX_FRAMES_PER_SECOND); the audio of the whole session is bounded
(ASR_MAX_SESSION_SECONDS); the first config is due within ASR_CONFIG_TIMEOUT of the start,
each config's first audio within ASR_FIRST_AUDIO_TIMEOUT, and otherwise audio within
ASR_IDLE_TIMEOUT of the last (or of the last result the client waited for), unless the
client is owed a result. Only audio puts the idle deadline off: configs, ends and updates
cost a client nothing to send, and a stream of them would hold a place for ever. For the
same reason a session may have at most ``MAX_EMPTY_UTTERANCES`` utterances without audio
(less than 20 ms: each opens and closes worker streams). Every breach is a ``ProtocolError`` (1008).

An ``offline`` utterance with ``spk`` embeds its config's reference clips (``spk_refs``) as
well as its own audio: their seconds, by their headers, count with the session's audio from
its config on, before any of them is decoded, as a file's references count with the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.audio.resample import resampled_bytes
from gateway.funasr.parser import AudioReceived, ConfigReceived, EndOfUtterance, Event, ParserState
from gateway.limits.rate import FULL_FRAME_BYTES, TokenBucket, frame_cost, text_cost
from gateway.settings import GatewaySettings
from shared.errors import ProtocolError

MAX_EMPTY_UTTERANCES = 16  # per session: utterances ended with less than 20 ms of audio
ACTIVE_AUDIO_BYTES = FULL_FRAME_BYTES  # 20 ms of 16 kHz audio puts the idle deadline off


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
        self._active_at = now  # the last ACTIVE_AUDIO_BYTES of audio, or result waited for
        self._audio_since_active = 0  # bytes at 16 kHz
        self._utterance_audio = 0  # bytes of the open utterance
        self._empty_utterances = 0

    def frame(self, size: int | None, audio_fs: int, now: float, text_chars: int = 0) -> None:
        """One frame against the frame cap: binary of ``size`` bytes at ``audio_fs``, or
        (``size`` None) text of ``text_chars`` characters."""
        cost = (
            text_cost(text_chars) if size is None else frame_cost(resampled_bytes(size, audio_fs))
        )
        if not self._frames.take(cost, now):
            raise ProtocolError(
                f"more than {self._settings.max_frames_per_s:g} frames a second"
                " (ASR_MAX_FRAMES_PER_SECOND); send audio in frames of 20 ms or more"
            )

    def event(self, event: Event, audio_fs: int, now: float) -> None:
        """What a parsed event starts or spends: a config's wait for audio, the session's
        audio."""
        match event:
            case ConfigReceived(config=config):
                self._configured_at = now
                self._utterance_audio = 0
                if config.spk and config.mode == "offline" and config.spk_refs:
                    self._references(sum(clip.seconds for clip in config.spk_refs))
            case AudioReceived(pcm=pcm):
                self._configured_at = None
                size = resampled_bytes(len(pcm), audio_fs)
                self._audio_bytes += size
                self._utterance_audio += size
                if self._audio_bytes > self._settings.max_session_bytes:
                    raise ProtocolError(
                        f"the session sent more than {self._settings.max_session_s:g} s"
                        " of audio (ASR_MAX_SESSION_SECONDS)"
                    )
                self._audio_since_active += size
                if self._audio_since_active >= ACTIVE_AUDIO_BYTES:
                    self.active(now)
            case EndOfUtterance():
                self._configured_at = None  # an empty utterance: nothing more is due
                if self._utterance_audio < ACTIVE_AUDIO_BYTES:
                    self._empty_utterances += 1
                    if self._empty_utterances > MAX_EMPTY_UTTERANCES:
                        raise ProtocolError(
                            f"more than {MAX_EMPTY_UTTERANCES} utterances ended with no audio"
                            " (less than 20 ms)"
                        )
            case _:
                pass

    def _references(self, seconds: float) -> None:
        """An utterance's reference clips, counted as the session's audio."""
        self._audio_bytes += round(seconds * BYTES_PER_SECOND)
        if self._audio_bytes > self._settings.max_session_bytes:
            raise ProtocolError(
                f"the session's audio and its known speakers' references ({seconds:.1f} s)"
                f" are more than {self._settings.max_session_s:g} s together"
                " (ASR_MAX_SESSION_SECONDS)"
            )

    def active(self, now: float) -> None:
        """The client has just done what puts the idle deadline off: sent audio, or been
        sent the result it waited for."""
        self._active_at = now
        self._audio_since_active = 0

    def results_sent(self, now: float) -> None:
        """The last utterance's results are all sent, and no other is open: the client waited
        for them, unless the utterance was empty (a result of nothing waits for nothing)."""
        if self._utterance_audio >= ACTIVE_AUDIO_BYTES:
            self.active(now)

    def next_frame(self, state: ParserState, owed: bool) -> Deadline:
        """When the next frame is due; ``owed``: the client waits for a result of ours
        after its end, so it may be silent for as long as that takes."""
        settings = self._settings
        idle = settings.idle_timeout_s
        deadline = Deadline(
            math.inf if owed else self._active_at + idle,
            f"no audio from the client for {idle:g} s (ASR_IDLE_TIMEOUT)",
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
