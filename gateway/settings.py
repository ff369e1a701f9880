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
    gc_tuning: bool = True  # shared.gc_tuning: freeze the start-up heap, rarer collections

    def __post_init__(self) -> None:
        if min(self.max_sessions, self.max_frame_bytes, self.max_text_bytes) < 1:
            raise ValueError("session and frame limits must be at least 1")
        for seconds in (self.idle_timeout_s, self.max_session_s, self.drain_timeout_s):
            if not (seconds > 0 and math.isfinite(seconds)):
                raise ValueError("timeouts must be positive numbers of seconds")

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
            gc_tuning=env.get("ASR_GC_TUNING", "1").strip().lower() not in ("0", "false", "no"),
        )


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
