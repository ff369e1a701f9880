"""Settings of the gateway, read from environment variables (``ASR_*``).

The worker pool's own settings (model, devices, transport, threads, ...) are
``shared.settings.PoolSettings``; these are the gateway's: access (keys, origins, the
per-address cap), file transcription, and everything else a session needs. Each variable's
type, default, rule and meaning are its entry in ``shared.settings_table``, named once per
field (``shared.settings.setting``).
"""

from __future__ import annotations

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
from shared.settings import PoolSettings, check_fields, computed, read_fields, setting


@dataclass(frozen=True, slots=True)
class AccessSettings:
    """Empty ``api_keys``: no key needed. Empty ``allowed_origins``: any origin.
    ``max_sessions_per_client`` 0: no per-address cap. ``protect_status``: ``/metrics`` and
    ``/readyz``'s details (worker pids, model paths) need a key too; ``/healthz`` and
    ``/readyz``'s status code never do, so that probes work without one."""

    api_keys: frozenset[str] = setting(table.API_KEYS)
    allowed_origins: frozenset[str] = setting(table.ALLOWED_ORIGINS)
    max_sessions_per_client: int = setting(table.MAX_SESSIONS_PER_CLIENT)
    protect_status: bool = False

    def __post_init__(self) -> None:
        check_fields(self)
        if self.protect_status and not self.api_keys:
            raise ValueError("ASR_PROTECT_STATUS=1 needs the keys to check: set ASR_API_KEYS")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AccessSettings:
        env = os.environ if environ is None else environ
        api_keys = table.API_KEYS.read(env)
        protect = table.PROTECT_STATUS.read(env)
        origins = (origin.rstrip("/").lower() for origin in table.ALLOWED_ORIGINS.read(env))
        return cls(
            **read_fields(
                cls,
                env,
                api_keys=api_keys,
                allowed_origins=frozenset(origins),
                # By default the status is protected exactly when sessions are.
                protect_status=bool(api_keys) if protect is None else protect,
            )
        )


@dataclass(frozen=True, slots=True)
class TranscribeSettings:
    max_bytes: int = setting(table.TRANSCRIBE_MAX_BYTES)
    concurrency: int = setting(table.TRANSCRIBE_CONCURRENCY)
    fetch_timeout_s: float = setting(table.FETCH_TIMEOUT)
    fetch_allow_private: bool = setting(table.FETCH_ALLOW_PRIVATE)
    # A body must arrive within this: else a few clients sending a byte a second would
    # hold every ASR_TRANSCRIBE_CONCURRENCY place (50 MiB at 1 MB/s takes 50 s).
    upload_timeout_s: float = setting(table.UPLOAD_TIMEOUT)
    # ... and keep up this average, so that holding a place costs bandwidth.
    upload_min_bytes_per_s: int = setting(table.UPLOAD_MIN_BYTES_PER_SECOND)
    concurrency_per_client: int = setting(table.TRANSCRIBE_CONCURRENCY_PER_CLIENT)

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TranscribeSettings:
        env = os.environ if environ is None else environ
        return cls(**read_fields(cls, env))


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
    max_sessions: int = setting(table.MAX_SESSIONS)
    max_frame_bytes: int = setting(table.MAX_FRAME_BYTES)  # 32 s of PCM; under --ws-max-size
    max_text_bytes: int = setting(table.MAX_TEXT_BYTES)
    idle_timeout_s: float = setting(table.IDLE_TIMEOUT)
    max_session_s: float = setting(table.MAX_SESSION_SECONDS)
    drain_timeout_s: float = setting(table.DRAIN_TIMEOUT)
    # Offline utterances, uploads and 2pass sentences are decoded in segments of at most
    # this (FunASR's VAD: max_single_segment_time, 60 s), cut at pauses: gateway.audio.segment.
    max_segment_s: float = setting(table.MAX_SEGMENT_SECONDS)
    # A file of wrong=>right text corrections for every result (read when serving starts).
    hotword_rules_file: str | None = setting(table.HOTWORD_RULES)
    # A JSON file of named voiceprints, the server's known speakers (read when serving starts).
    speakers_file: str | None = setting(table.SPEAKERS)
    # The audio all sessions together may hold in the gateway (offline utterances, 2pass
    # sentences) before new sessions are refused with 1013: gateway.limits.budget.
    max_buffered_s: float = computed(table.MAX_BUFFERED_SECONDS, lambda: default_max_buffered_s())
    # What one client may cost the others (issue #14): frames a second (a token bucket
    # holding a second's worth: gateway.limits.rate), the time from connecting to the config
    # and from a config to its first audio, and how long one result may wait to be sent.
    max_frames_per_s: float = setting(table.MAX_FRAMES_PER_SECOND)
    config_timeout_s: float = setting(table.CONFIG_TIMEOUT)
    # FunASR's HTML5 page opens the microphone after its config.
    first_audio_timeout_s: float = setting(table.FIRST_AUDIO_TIMEOUT)
    send_timeout_s: float = setting(table.SEND_TIMEOUT)  # under uvicorn's --ws-ping-timeout
    # A session over max_sessions may wait this long for a place, in arrival order, at most
    # admission_queue of them (None: max_sessions); 0: refused at once.
    admission_wait_s: float = setting(table.ADMISSION_WAIT)
    admission_queue: int | None = setting(table.ADMISSION_QUEUE)
    # shared.gc_tuning: freeze the start-up heap, rarer collections.
    gc_tuning: bool = setting(table.GC_TUNING)
    # Resumable sessions (gateway.session.resume.resumes): how long a dropped one waits for
    # its client, how many may wait at once, and the name resume tokens give this replica.
    resume_window_s: float = setting(table.RESUME_WINDOW)
    # Scale-out (deploy/): the balancer is told of a drain this long before it starts,
    # and may read the free places from an agent-check port.
    drain_delay_s: float = setting(table.DRAIN_DELAY)
    agent_port: int | None = setting(table.AGENT_PORT)
    # None: the host the server listens on (gateway.app), as far as the app knows it.
    agent_host: str | None = setting(table.AGENT_HOST)
    max_parked_sessions: int = setting(table.MAX_PARKED_SESSIONS)
    max_parked_per_client: int = setting(table.MAX_PARKED_PER_CLIENT)
    max_resumes_per_minute: float = setting(table.MAX_RESUMES_PER_MINUTE)
    replica_id: str = computed(table.REPLICA_ID, lambda: default_replica_id())

    def __post_init__(self) -> None:
        check_fields(self)

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
        return cls(
            **read_fields(
                cls,
                env,
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
            )
        )


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
