"""Settings of the worker pool, read from environment variables (``ASR_*``).

Pure data: resolving a model name to a directory happens in ``workers.models.resolve``. Each
variable's type, default and meaning are its entry in ``shared.settings_table``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from shared import settings_table as table
from shared.engines import RUNTIME_ALIASES, RUNTIMES, Precision, Role, Runtime
from shared.env import Setting
from shared.settings_table import (
    BATCH_HOLDS,
    DEFAULT_MODEL,
    PRECISIONS,
    BatchHold,
    Transport,
)

__all__ = [
    "DEFAULT_MODEL",
    "PRECISIONS",
    "PoolSettings",
    "Precision",
    "Transport",
    "speaker_pool_settings",
]


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """How many workers, on which devices, loading what, talking over which transport."""

    model: str = table.MODEL.default
    # The role its model fills: ASR_OFFLINE_MODEL's pool is the offline one, and so on.
    kind: Role = Role.STREAMING
    # Offline pools: a CT-Transformer (ASR_PUNC_MODEL) that punctuates every result.
    punc_model: str | None = None
    devices: tuple[str, ...] = table.DEVICES.default
    workers_per_device: int = table.WORKERS_PER_DEVICE.default
    transport: Transport = table.TRANSPORT.default
    threads_per_worker: int = table.THREADS_PER_WORKER.default
    # ~1 s of 16 kHz int16: a 600 ms chunk fits one slot.
    slot_bytes: int = table.SLOT_BYTES.default
    slots_per_worker: int = table.SLOTS_PER_WORKER.default
    max_batch: int = table.MAX_BATCH.default
    stream_window: int = table.STREAM_WINDOW.default  # results unread before send() waits
    stream_idle_timeout_s: float = table.STREAM_IDLE_TIMEOUT.default
    start_timeout_s: float = table.WORKER_START_TIMEOUT.default
    stop_timeout_s: float = table.WORKER_STOP_TIMEOUT.default
    # A worker that owes results and sends none for this long, plus
    # step_seconds_per_audio_second for every second of audio it owes, is taken for hung
    # and killed (hang_timeout_s). A step of max_batch large-model chunks on one CPU core
    # takes ~7 s; an offline decode of a long utterance takes time in proportion to it
    # (its final piece owes the whole utterance: workers.pool.handle says what counts).
    step_timeout_s: float = table.WORKER_STEP_TIMEOUT.default
    step_seconds_per_audio_second: float = table.WORKER_STEP_SECONDS_PER_AUDIO_SECOND.default
    # WorkerPool.health reports the pool unable to serve once every worker has been lost
    # and has failed to restart at least once, for longer than this.
    unhealthy_after_s: float = table.UNHEALTHY_AFTER.default
    # How its model runs (ASR_RUNTIME): the engine its kind has for it (workers.engines.kinds).
    runtime: Runtime = table.RUNTIME.default
    # A user's engine class by import path ("package.module:Class"), which serves the model
    # instead of its kind's engine; None: the kind's.
    engine: str | None = None
    onnx_precision: Precision = table.ONNX_PRECISION.default
    # When a worker may hold a step open for more streams' chunks, when it has fewer than
    # max_batch (workers.worker.batching): more waiting means bigger batches, at the cost
    # of latency. "wait": up to batch_wait_s.
    batch_hold: BatchHold = table.BATCH_HOLD.default
    batch_wait_s: float = table.BATCH_WAIT_MS.default
    # The real-time budget of a chunk from send to result: a step is never held open past
    # the point where the oldest waiting chunk would miss it.
    chunk_deadline_s: float = table.CHUNK_DEADLINE_MS.default
    model_cache_dir: str = table.MODEL_CACHE.default
    # Unix nice of the pool's workers (the offline pool's: ASR_OFFLINE_NICE).
    worker_nice: int = 0

    def __post_init__(self) -> None:
        if self.transport not in ("shm", "queue"):
            raise ValueError(f"transport must be 'shm' or 'queue', not {self.transport!r}")
        if self.workers_per_device < 1 or self.threads_per_worker < 1:
            raise ValueError("workers per device and threads per worker must be at least 1")
        if self.slot_bytes <= 0 or self.slot_bytes % 2:
            raise ValueError("slot_bytes must be a positive even number")
        if self.slots_per_worker < 1 or self.max_batch < 1 or self.stream_window < 1:
            raise ValueError("slots, max batch and stream window must be at least 1")
        if self.engine is not None and (self.engine in RUNTIMES or self.engine in RUNTIME_ALIASES):
            raise ValueError(
                f"engine {self.engine!r} is a runtime: set runtime (ASR_RUNTIME); an engine"
                " is a class, 'package.module:Class', or one of ours by name"
            )
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, not {self.runtime!r}")
        if self.onnx_precision not in PRECISIONS:
            raise ValueError(f"ONNX precision must be fp32 or int8, not {self.onnx_precision!r}")
        if self.batch_hold not in BATCH_HOLDS:
            raise ValueError(f"batch hold must be due or wait, not {self.batch_hold!r}")
        if self.batch_wait_s < 0:
            raise ValueError("the batch wait cannot be negative")
        if not (
            math.isfinite(self.step_seconds_per_audio_second)
            and self.step_seconds_per_audio_second >= 0
        ):
            raise ValueError("the step seconds per audio second must be zero or more")
        if not 0 <= self.worker_nice <= 19:
            raise ValueError("the workers' nice value must be from 0 to 19")
        if self.unhealthy_after_s <= 0:
            raise ValueError("unhealthy_after_s must be positive")

    def hang_timeout_s(self, owed_audio_s: float) -> float:
        """How long a worker that owes ``owed_audio_s`` seconds of audio may go without
        answering before it is taken for hung: the step timeout, and real time for the
        audio on top (a long utterance's offline decode may honestly take a while)."""
        return self.step_timeout_s + owed_audio_s * self.step_seconds_per_audio_second

    @property
    def worker_devices(self) -> tuple[str, ...]:
        """One entry per worker process: every device, ``workers_per_device`` times."""
        return tuple(d for d in self.devices for _ in range(self.workers_per_device))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PoolSettings:
        env = os.environ if environ is None else environ
        return cls(
            model=table.MODEL.read(env),
            devices=table.DEVICES.read(env),
            workers_per_device=table.WORKERS_PER_DEVICE.read(env),
            transport=table.TRANSPORT.read(env),
            threads_per_worker=table.THREADS_PER_WORKER.read(env),
            slot_bytes=table.SLOT_BYTES.read(env),
            slots_per_worker=table.SLOTS_PER_WORKER.read(env),
            max_batch=table.MAX_BATCH.read(env),
            stream_window=table.STREAM_WINDOW.read(env),
            stream_idle_timeout_s=table.STREAM_IDLE_TIMEOUT.read(env),
            start_timeout_s=table.WORKER_START_TIMEOUT.read(env),
            stop_timeout_s=table.WORKER_STOP_TIMEOUT.read(env),
            step_timeout_s=table.WORKER_STEP_TIMEOUT.read(env),
            step_seconds_per_audio_second=table.WORKER_STEP_SECONDS_PER_AUDIO_SECOND.read(env),
            unhealthy_after_s=table.UNHEALTHY_AFTER.read(env),
            runtime=runtime_of(env, table.RUNTIME, table.ENGINE),
            engine=user_engine(table.ENGINE.read(env)),
            onnx_precision=table.ONNX_PRECISION.read(env),
            batch_hold=table.BATCH_HOLD.read(env),
            batch_wait_s=table.BATCH_WAIT_MS.read(env),
            chunk_deadline_s=table.CHUNK_DEADLINE_MS.read(env),
            model_cache_dir=table.MODEL_CACHE.read(env),
        )


def speaker_pool_settings(
    pool: PoolSettings, model: str, devices: tuple[str, ...], engine: str | None = None
) -> PoolSettings:
    """A speaker pool (CAM++) beside ``pool``: one worker per device, whose file is one
    stream decoded at its end, so a step is never held open for more."""
    return replace(
        pool,
        model=model,
        kind=Role.SPEAKER,
        punc_model=None,
        runtime="torch",  # CAM++ has no other engine
        engine=engine,  # a user's, named by its own models-file entry
        devices=devices,
        workers_per_device=1,
        batch_hold="wait",
        batch_wait_s=0.0,
        chunk_deadline_s=60.0,
    )


def runtime_of(
    env: Mapping[str, str], runtime: Setting[Runtime], old_name: Setting[str | None]
) -> Runtime:
    """``runtime``'s value, or where only its old name is set (``ASR_ENGINE``, holding a
    runtime's old name), that one's; both set to different runtimes is an error."""
    value = old_name.read(env)
    old = next((r for r in RUNTIMES if RUNTIME_ALIASES.get(value or "", value) == r), None)
    if old is None:
        return runtime.read(env)  # unset, or a user's engine: not a runtime
    if runtime.name in env and runtime.read(env) != old:
        raise ValueError(
            f"{old_name.name} is the old name of {runtime.name}: set {runtime.name} alone"
        )
    return old


def user_engine(engine: str | None) -> str | None:
    """``ASR_ENGINE``'s value where it names a user's engine class, not a runtime."""
    if engine is None or engine in RUNTIMES or engine in RUNTIME_ALIASES:
        return None
    return engine


def companion_runtime(
    env: Mapping[str, str], runtime: Setting[Runtime | None], old_name: Setting[Runtime | None]
) -> Runtime | None:
    """A companion pool's own runtime (``ASR_OFFLINE_RUNTIME``, or its old name
    ``ASR_OFFLINE_ENGINE``), None where neither is set: the streaming pool's then."""
    new, old = runtime.read(env), old_name.read(env)
    if new is not None and old is not None and new != old:
        raise ValueError(
            f"{old_name.name} is the old name of {runtime.name}: set {runtime.name} alone"
        )
    return new or old
