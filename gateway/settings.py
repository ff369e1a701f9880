"""Settings of the gateway, read from environment variables (``ASR_*``).

The worker pool's own settings (model, devices, transport, threads, ...) are
``shared.settings.PoolSettings``; this adds what the WebSocket side needs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gateway.access import AccessSettings
from gateway.endpointer import EndpointSettings
from gateway.transcribe import TranscribeSettings
from shared.messages import SAMPLE_RATE
from shared.settings import (
    PoolSettings,
    env_float,
    env_milliseconds,
    env_positive_float,
    env_positive_int,
    parse_devices,
)


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything ``uvicorn gateway.app:app`` is configured with."""

    pool: PoolSettings = field(default_factory=PoolSettings)
    access: AccessSettings = field(default_factory=AccessSettings)
    transcribe: TranscribeSettings = field(default_factory=TranscribeSettings)
    # A second pool with the offline Paraformer (ASR_OFFLINE_MODEL): it decodes the
    # WebSocket `offline` mode and /v1/transcribe. None: the streaming pool does.
    offline_pool: PoolSettings | None = None
    # A pool with FunASR's FSMN-VAD (ASR_VAD_MODEL): 2pass sentence ends. None: the
    # energy endpointer (``endpoint``) finds them.
    vad_pool: PoolSettings | None = None
    endpoint: EndpointSettings = field(default_factory=EndpointSettings)  # 2pass sentences
    max_sessions: int = 64
    max_frame_bytes: int = 1 << 20  # 32 s of 16 kHz PCM; under uvicorn's --ws-max-size
    max_text_bytes: int = 65536
    idle_timeout_s: float = 60.0
    max_session_s: float = 3600.0
    drain_timeout_s: float = 20.0
    # Offline utterances, uploads and 2pass sentences are decoded in segments of at most
    # this (FunASR's VAD: max_single_segment_time, 60 s), cut at pauses: gateway.segment.
    max_segment_s: float = 60.0
    # The audio all sessions together may hold in the gateway (offline utterances, 2pass
    # sentences) before new sessions are refused with 1013: gateway.budget.
    max_buffered_s: float = field(default_factory=lambda: default_max_buffered_s())
    # What one client may cost the others (issue #14): frames a second (a token bucket
    # holding a second's worth: gateway.ratelimit), the time from connecting to the config
    # and from a config to its first audio, and how long one result may wait to be sent.
    max_frames_per_s: float = 200.0
    config_timeout_s: float = 10.0
    first_audio_timeout_s: float = 30.0  # FunASR's HTML5 page opens the mic after its config
    send_timeout_s: float = 10.0  # under uvicorn's --ws-ping-timeout (20 s)
    # A session over max_sessions may wait this long for a place, in arrival order, at most
    # admission_queue of them (None: max_sessions); 0: refused at once.
    admission_wait_s: float = 0.0
    admission_queue: int | None = None
    gc_tuning: bool = True  # shared.gc_tuning: freeze the start-up heap, rarer collections

    def __post_init__(self) -> None:
        if min(self.max_sessions, self.max_frame_bytes, self.max_text_bytes) < 1:
            raise ValueError("session and frame limits must be at least 1")
        for seconds in (
            self.idle_timeout_s,
            self.max_session_s,
            self.drain_timeout_s,
            self.max_segment_s,
            self.max_buffered_s,
        ):
            if not (seconds > 0 and math.isfinite(seconds)):
                raise ValueError("timeouts must be positive numbers of seconds")
        for seconds in (
            self.max_frames_per_s,
            self.config_timeout_s,
            self.first_audio_timeout_s,
            self.send_timeout_s,
        ):
            if not (seconds > 0 and math.isfinite(seconds)):
                raise ValueError("frame rates and timeouts must be positive and finite")
        if not (self.admission_wait_s >= 0 and math.isfinite(self.admission_wait_s)):
            raise ValueError("the admission wait must be zero or more seconds")
        if self.admission_queue is not None and self.admission_queue < 1:
            raise ValueError("the admission queue must hold at least 1")

    @property
    def admission_queue_size(self) -> int:
        """Sessions that may wait for a place at once (``admission_queue``, default
        ``max_sessions``)."""
        return self.max_sessions if self.admission_queue is None else self.admission_queue

    @property
    def max_segment_bytes(self) -> int:
        """``max_segment_s`` of 16 kHz int16 PCM."""
        return int(self.max_segment_s * SAMPLE_RATE) * 2

    @property
    def max_buffered_bytes(self) -> int:
        return int(self.max_buffered_s * SAMPLE_RATE) * 2

    @property
    def max_session_bytes(self) -> int:
        """The most PCM one session may send: ``max_session_s`` of 16 kHz int16 audio."""
        return int(self.max_session_s * SAMPLE_RATE) * 2

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GatewaySettings:
        env = os.environ if environ is None else environ
        defaults = cls()
        pool = PoolSettings.from_env(env)
        return cls(
            pool=pool,
            access=AccessSettings.from_env(env),
            transcribe=TranscribeSettings.from_env(env),
            offline_pool=_offline_pool(env, pool),
            vad_pool=_vad_pool(env, pool),
            endpoint=EndpointSettings(
                silence_ms=env_positive_int(env, "ASR_ENDPOINT_SILENCE_MS", 800),
                min_speech_ms=env_positive_int(env, "ASR_ENDPOINT_MIN_SPEECH_MS", 300),
                energy_dbfs=_dbfs(env, "ASR_ENDPOINT_ENERGY_DBFS", -40.0),
                preroll_ms=round(
                    env_milliseconds(env, "ASR_SENTENCE_PREROLL_MS", 300.0, allow_zero=True) * 1000
                ),
            ),
            max_sessions=env_positive_int(env, "ASR_MAX_SESSIONS", defaults.max_sessions),
            max_frame_bytes=env_positive_int(env, "ASR_MAX_FRAME_BYTES", defaults.max_frame_bytes),
            max_text_bytes=env_positive_int(env, "ASR_MAX_TEXT_BYTES", defaults.max_text_bytes),
            idle_timeout_s=env_positive_float(env, "ASR_IDLE_TIMEOUT", defaults.idle_timeout_s),
            max_session_s=env_positive_float(
                env, "ASR_MAX_SESSION_SECONDS", defaults.max_session_s
            ),
            drain_timeout_s=env_positive_float(env, "ASR_DRAIN_TIMEOUT", defaults.drain_timeout_s),
            max_segment_s=env_positive_float(
                env, "ASR_MAX_SEGMENT_SECONDS", defaults.max_segment_s
            ),
            max_buffered_s=env_positive_float(
                env, "ASR_MAX_BUFFERED_SECONDS", defaults.max_buffered_s
            ),
            max_frames_per_s=env_float(
                env,
                "ASR_MAX_FRAMES_PER_SECOND",
                defaults.max_frames_per_s,
                what="a number of frames a second",
                valid=lambda v: v > 0,
                requirement="a positive number of frames a second",
            ),
            config_timeout_s=env_positive_float(
                env, "ASR_CONFIG_TIMEOUT", defaults.config_timeout_s
            ),
            first_audio_timeout_s=env_positive_float(
                env, "ASR_FIRST_AUDIO_TIMEOUT", defaults.first_audio_timeout_s
            ),
            send_timeout_s=env_positive_float(env, "ASR_SEND_TIMEOUT", defaults.send_timeout_s),
            admission_wait_s=env_float(
                env,
                "ASR_ADMISSION_WAIT",
                defaults.admission_wait_s,
                what="a number of seconds",
                valid=lambda v: v >= 0,
                requirement="zero or a positive number of seconds",
            ),
            # Unset: None, which means max_sessions.
            admission_queue=env_positive_int(env, "ASR_ADMISSION_QUEUE", 0) or None,
            gc_tuning=env.get("ASR_GC_TUNING", "1").strip().lower() not in ("0", "false", "no"),
        )


def default_max_buffered_s() -> float:
    """An eighth of the machine's memory, at two bytes of gateway memory per byte of PCM
    held (the buffer, and its copy as it goes to the workers): 24 GiB gives ~14 hours."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        memory = 8 << 30
    return float(memory // 8 // (2 * 2 * SAMPLE_RATE))


def _offline_pool(env: Mapping[str, str], pool: PoolSettings) -> PoolSettings | None:
    """The offline pool: ``ASR_OFFLINE_MODEL`` on ``ASR_OFFLINE_DEVICES`` (default: the
    streaming pool's devices), holding steps ``ASR_OFFLINE_BATCH_WAIT_MS`` (50) for more
    utterances to decode together; the rest as the streaming pool."""
    model = env.get("ASR_OFFLINE_MODEL", "").strip()
    punc_model = env.get("ASR_PUNC_MODEL", "").strip() or None
    if not model:
        if punc_model:
            raise ValueError(
                "ASR_PUNC_MODEL punctuates the offline model's results: set ASR_OFFLINE_MODEL"
            )
        return None
    devices = env.get("ASR_OFFLINE_DEVICES", "").strip()
    return replace(
        pool,
        model=model,
        kind="offline",
        punc_model=punc_model,
        engine="paraformer",
        devices=parse_devices(devices) if devices else pool.devices,
        batch_wait_s=env_milliseconds(env, "ASR_OFFLINE_BATCH_WAIT_MS", 50.0, allow_zero=True),
        # An utterance is decoded at its end; the wait above bounds the hold, not this.
        chunk_deadline_s=60.0,
    )


def _vad_pool(env: Mapping[str, str], pool: PoolSettings) -> PoolSettings | None:
    """The VAD pool: ``ASR_VAD_MODEL`` on ``ASR_VAD_DEVICES`` (default: one CPU worker;
    the FSMN-VAD takes ~2 ms per 60 ms of audio on one core)."""
    model = env.get("ASR_VAD_MODEL", "").strip()
    if not model:
        return None
    devices = env.get("ASR_VAD_DEVICES", "").strip()
    return replace(
        pool,
        model=model,
        kind="vad",
        engine="paraformer",  # the pool's model decides: fsmn-vad
        devices=parse_devices(devices) if devices else ("cpu",),
        workers_per_device=1,
        batch_wait_s=0.0,
    )


def _dbfs(env: Mapping[str, str], name: str, default: float) -> float:
    return env_float(
        env,
        name,
        default,
        what="a level in dBFS (e.g. -40)",
        valid=lambda v: v < 0,
        requirement="a negative level in dBFS",
    )
