"""Settings of the gateway, read from environment variables (``ASR_*``).

The worker pool's own settings (model, devices, transport, threads, ...) are
``shared.settings.PoolSettings``; these are the gateway's: access (keys, origins, the
per-address cap), file transcription, and everything else a session needs. Each variable's
type, default and meaning are its entry in ``shared.settings_table``.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.audio.endpointer import EndpointSettings
from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.models.models_file import environment_table, read_models_file
from gateway.models.table import ModelTable, single_model
from shared import settings_table as table
from shared.engines import Role
from shared.messages import SAMPLE_RATE
from shared.settings import PoolSettings


@dataclass(frozen=True, slots=True)
class AccessSettings:
    """Empty ``api_keys``: no key needed. Empty ``allowed_origins``: any origin.
    ``max_sessions_per_client`` 0: no per-address cap. ``protect_status``: ``/metrics`` and
    ``/readyz``'s details (worker pids, model paths) need a key too; ``/healthz`` and
    ``/readyz``'s status code never do, so that probes work without one."""

    api_keys: frozenset[str] = table.API_KEYS.default
    allowed_origins: frozenset[str] = table.ALLOWED_ORIGINS.default
    max_sessions_per_client: int = table.MAX_SESSIONS_PER_CLIENT.default
    protect_status: bool = False

    def __post_init__(self) -> None:
        if self.max_sessions_per_client < 0:
            raise ValueError("ASR_MAX_SESSIONS_PER_CLIENT must be 0 (no cap) or positive")
        if self.protect_status and not self.api_keys:
            raise ValueError("ASR_PROTECT_STATUS=1 needs the keys to check: set ASR_API_KEYS")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AccessSettings:
        env = os.environ if environ is None else environ
        api_keys = table.API_KEYS.read(env)
        protect = table.PROTECT_STATUS.read(env)
        return cls(
            api_keys=api_keys,
            allowed_origins=frozenset(
                origin.rstrip("/").lower() for origin in table.ALLOWED_ORIGINS.read(env)
            ),
            max_sessions_per_client=table.MAX_SESSIONS_PER_CLIENT.read(env),
            # By default the status is protected exactly when sessions are.
            protect_status=bool(api_keys) if protect is None else protect,
        )


@dataclass(frozen=True, slots=True)
class TranscribeSettings:
    max_bytes: int = table.TRANSCRIBE_MAX_BYTES.default
    concurrency: int = table.TRANSCRIBE_CONCURRENCY.default
    fetch_timeout_s: float = table.FETCH_TIMEOUT.default
    fetch_allow_private: bool = table.FETCH_ALLOW_PRIVATE.default
    # A body must arrive within this: else a few clients sending a byte a second would
    # hold every ASR_TRANSCRIBE_CONCURRENCY place (50 MiB at 1 MB/s takes 50 s).
    upload_timeout_s: float = table.UPLOAD_TIMEOUT.default
    # ... and keep up this average, so that holding a place costs bandwidth.
    upload_min_bytes_per_s: int = table.UPLOAD_MIN_BYTES_PER_SECOND.default
    concurrency_per_client: int = table.TRANSCRIBE_CONCURRENCY_PER_CLIENT.default

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TranscribeSettings:
        env = os.environ if environ is None else environ
        return cls(
            max_bytes=table.TRANSCRIBE_MAX_BYTES.read(env),
            concurrency=table.TRANSCRIBE_CONCURRENCY.read(env),
            fetch_timeout_s=table.FETCH_TIMEOUT.read(env),
            fetch_allow_private=table.FETCH_ALLOW_PRIVATE.read(env),
            upload_timeout_s=table.UPLOAD_TIMEOUT.read(env),
            upload_min_bytes_per_s=table.UPLOAD_MIN_BYTES_PER_SECOND.read(env),
            concurrency_per_client=table.TRANSCRIBE_CONCURRENCY_PER_CLIENT.read(env),
        )


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything ``uvicorn gateway.app:app`` is configured with."""

    pool: PoolSettings = field(default_factory=PoolSettings)
    access: AccessSettings = field(default_factory=AccessSettings)
    transcribe: TranscribeSettings = field(default_factory=TranscribeSettings)
    # The default model's companion pools, by role: the offline model (ASR_OFFLINE_MODEL:
    # the `offline` mode, 2pass sentences, files; else the streaming pool decodes them),
    # FunASR's FSMN-VAD (ASR_VAD_MODEL: 2pass sentence ends; else the energy endpointer,
    # ``endpoint``), CAM++ (ASR_SPEAKER_MODEL: speaker labels for the requests that ask).
    companions: Mapping[Role, PoolSettings] = field(default_factory=dict)
    # Several models (ASR_MODELS): each with its own pools. None: the one model above.
    models: ModelTable | None = None
    endpoint: EndpointSettings = field(default_factory=EndpointSettings)  # 2pass sentences
    max_sessions: int = table.MAX_SESSIONS.default
    max_frame_bytes: int = table.MAX_FRAME_BYTES.default  # 32 s of PCM; under --ws-max-size
    max_text_bytes: int = table.MAX_TEXT_BYTES.default
    idle_timeout_s: float = table.IDLE_TIMEOUT.default
    max_session_s: float = table.MAX_SESSION_SECONDS.default
    drain_timeout_s: float = table.DRAIN_TIMEOUT.default
    # Offline utterances, uploads and 2pass sentences are decoded in segments of at most
    # this (FunASR's VAD: max_single_segment_time, 60 s), cut at pauses: gateway.audio.segment.
    max_segment_s: float = table.MAX_SEGMENT_SECONDS.default
    # The audio all sessions together may hold in the gateway (offline utterances, 2pass
    # sentences) before new sessions are refused with 1013: gateway.limits.budget.
    max_buffered_s: float = field(default_factory=lambda: default_max_buffered_s())
    # What one client may cost the others (issue #14): frames a second (a token bucket
    # holding a second's worth: gateway.limits.rate), the time from connecting to the config
    # and from a config to its first audio, and how long one result may wait to be sent.
    max_frames_per_s: float = table.MAX_FRAMES_PER_SECOND.default
    config_timeout_s: float = table.CONFIG_TIMEOUT.default
    # FunASR's HTML5 page opens the microphone after its config.
    first_audio_timeout_s: float = table.FIRST_AUDIO_TIMEOUT.default
    send_timeout_s: float = table.SEND_TIMEOUT.default  # under uvicorn's --ws-ping-timeout
    # A session over max_sessions may wait this long for a place, in arrival order, at most
    # admission_queue of them (None: max_sessions); 0: refused at once.
    admission_wait_s: float = table.ADMISSION_WAIT.default
    admission_queue: int | None = table.ADMISSION_QUEUE.default
    # shared.gc_tuning: freeze the start-up heap, rarer collections.
    gc_tuning: bool = table.GC_TUNING.default
    # Resumable sessions (gateway.session.resume.resumes): how long a dropped one waits for
    # its client, how many may wait at once, and the name resume tokens give this replica.
    resume_window_s: float = table.RESUME_WINDOW.default
    # Scale-out (deploy/): the balancer is told of a drain this long before it starts,
    # and may read the free places from an agent-check port.
    drain_delay_s: float = table.DRAIN_DELAY.default
    agent_port: int | None = table.AGENT_PORT.default
    # None: the host the server listens on (gateway.app), as far as the app knows it.
    agent_host: str | None = table.AGENT_HOST.default
    max_parked_sessions: int = table.MAX_PARKED_SESSIONS.default
    max_parked_per_client: int = table.MAX_PARKED_PER_CLIENT.default
    max_resumes_per_minute: float = table.MAX_RESUMES_PER_MINUTE.default
    replica_id: str = field(default_factory=lambda: default_replica_id())

    def __post_init__(self) -> None:
        if min(self.max_sessions, self.max_frame_bytes, self.max_text_bytes) < 1:
            raise ValueError("session and frame limits must be at least 1")
        for seconds in (
            self.idle_timeout_s,
            self.max_session_s,
            self.drain_timeout_s,
            self.max_segment_s,
            self.max_buffered_s,
            self.resume_window_s,
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
        if not (self.drain_delay_s >= 0 and math.isfinite(self.drain_delay_s)):
            raise ValueError("the drain delay must be zero or more seconds")
        if not (self.admission_wait_s >= 0 and math.isfinite(self.admission_wait_s)):
            raise ValueError("the admission wait must be zero or more seconds")
        if self.admission_queue is not None and self.admission_queue < 1:
            raise ValueError("the admission queue must hold at least 1")
        if self.max_parked_sessions < 0 or self.max_parked_per_client < 0:
            raise ValueError("ASR_MAX_PARKED_SESSIONS and _PER_CLIENT must be 0 or more")
        if not (self.max_resumes_per_minute > 0 and math.isfinite(self.max_resumes_per_minute)):
            raise ValueError("ASR_MAX_RESUMES_PER_MINUTE must be a positive number")
        if not REPLICA_ID_PATTERN.fullmatch(self.replica_id):
            raise ValueError(
                f"ASR_REPLICA_ID={self.replica_id!r}: letters, digits, '-' and '_' only, at most"
                " 64 (it is part of every resume token)"
            )

    @property
    def model_table(self) -> ModelTable:
        """The models served: the file's, else the one of ``pool`` and its companions."""
        if self.models is not None:
            return self.models
        return single_model(self.pool, self.companions)

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
        models_file = table.MODELS.read(env)
        # The one model of the ASR_*MODEL variables is read as a one-entry models file.
        read = environment_table(env) if models_file is None else read_models_file(models_file, env)
        default = read.default_choice  # what is not chosen per model
        companions = {role: entry.settings for role, entry in default.companions.items()}
        max_buffered_s = table.MAX_BUFFERED_SECONDS.read(env)
        return cls(
            pool=default.streaming.settings,
            access=AccessSettings.from_env(env),
            transcribe=TranscribeSettings.from_env(env),
            companions=companions,
            models=None if models_file is None else read,
            endpoint=EndpointSettings(
                silence_ms=_milliseconds(table.ENDPOINT_SILENCE_MS.read(env)),
                min_speech_ms=_milliseconds(table.ENDPOINT_MIN_SPEECH_MS.read(env)),
                energy_dbfs=table.ENDPOINT_ENERGY_DBFS.read(env),
                preroll_ms=_milliseconds(table.SENTENCE_PREROLL_MS.read(env)),
            ),
            max_sessions=table.MAX_SESSIONS.read(env),
            max_frame_bytes=table.MAX_FRAME_BYTES.read(env),
            max_text_bytes=table.MAX_TEXT_BYTES.read(env),
            idle_timeout_s=table.IDLE_TIMEOUT.read(env),
            max_session_s=table.MAX_SESSION_SECONDS.read(env),
            drain_timeout_s=table.DRAIN_TIMEOUT.read(env),
            max_segment_s=table.MAX_SEGMENT_SECONDS.read(env),
            max_buffered_s=default_max_buffered_s() if max_buffered_s is None else max_buffered_s,
            max_frames_per_s=table.MAX_FRAMES_PER_SECOND.read(env),
            config_timeout_s=table.CONFIG_TIMEOUT.read(env),
            first_audio_timeout_s=table.FIRST_AUDIO_TIMEOUT.read(env),
            send_timeout_s=table.SEND_TIMEOUT.read(env),
            admission_wait_s=table.ADMISSION_WAIT.read(env),
            admission_queue=table.ADMISSION_QUEUE.read(env),  # None: max_sessions
            gc_tuning=table.GC_TUNING.read(env),
            resume_window_s=table.RESUME_WINDOW.read(env),
            drain_delay_s=table.DRAIN_DELAY.read(env),
            agent_port=table.AGENT_PORT.read(env),
            agent_host=table.AGENT_HOST.read(env),
            max_parked_sessions=table.MAX_PARKED_SESSIONS.read(env),
            max_parked_per_client=table.MAX_PARKED_PER_CLIENT.read(env),
            max_resumes_per_minute=table.MAX_RESUMES_PER_MINUTE.read(env),
            replica_id=table.REPLICA_ID.read(env) or default_replica_id(),
        )


REPLICA_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def default_replica_id() -> str:
    """The host name, in the characters a replica id may hold: each replica of a Deployment
    or a compose file has its own (several on one host need ASR_REPLICA_ID)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", socket.gethostname())[:64]
    return name or "gateway"


def default_max_buffered_s() -> float:
    """An eighth of the machine's memory, at two bytes of gateway memory per byte of PCM
    held (the buffer, and its copy as it goes to the workers): 24 GiB gives ~14 hours."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        memory = 8 << 30
    return float(memory // 8 // (2 * BYTES_PER_SECOND))


def _milliseconds(seconds: float) -> int:
    """A duration the table read in seconds, as ``EndpointSettings`` takes it."""
    return round(seconds * 1000)
