"""Settings of the worker pool, read from environment variables (``ASR_*``).

Pure data: resolving a model name to a directory happens in ``workers.models.resolve``. Each
variable's type, default, rule and meaning are its entry in ``shared.settings_table``; a
settings dataclass names each field's entry once (``setting``), and both ways in are held to
its rule: ``from_env`` reads the variable through it (``read_fields``: an error names the
variable), ``__post_init__`` checks a value built in Python against it (``check_fields``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

from shared import settings_table as table
from shared.engines import RUNTIME_ALIASES, RUNTIMES, Precision, Role, Runtime
from shared.env import Integer, Kind, Number, OrNone, Setting
from shared.settings_table import DEFAULT_MODEL, PRECISIONS, BatchHold, Transport

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "DEFAULT_MODEL",
    "PRECISIONS",
    "PoolSettings",
    "Precision",
    "Transport",
    "speaker_pool_settings",
]

T = TypeVar("T")
ENTRY = "setting"  # a field's metadata: its entry in the table


def setting(entry: Setting[T]) -> T:
    """A settings dataclass's field of ``entry``: its default, its variable, its rule."""
    return field(default=entry.default, metadata={ENTRY: entry})


def computed(entry: Setting[T | None], default: Callable[[], T]) -> T:
    """A field of ``entry``, whose None (unset) means ``default()``."""
    return field(default_factory=default, metadata={ENTRY: entry})


def read_fields(
    cls: type[DataclassInstance], env: Mapping[str, str], **given: Any
) -> dict[str, Any]:
    """``cls``'s arguments: ``given``, and each other field of an entry read from ``env``."""
    values = dict(given)
    for each in fields(cls):
        entry = each.metadata.get(ENTRY)
        if entry is None or each.name in values:
            continue
        value = entry.read(env)
        if value is not None or each.default_factory is MISSING:
            values[each.name] = value
    return values


def check_fields(settings: DataclassInstance) -> None:
    """Refuse a field's value that its entry's kind refuses as its variable's text."""
    for each in fields(settings):
        entry = each.metadata.get(ENTRY)
        if entry is None:
            continue
        kind, value = entry.kind, getattr(settings, each.name)
        if isinstance(kind, OrNone) and each.default_factory is not MISSING:
            kind = kind.kind  # computed: its None was the default's
        if not _takes(kind, value):
            raise ValueError(f"{each.name} must be {_rule(kind)}, not {value!r}")


def _takes(kind: Kind[Any], value: object) -> bool:
    """Whether ``kind`` reads ``value`` back from its variable's spelling of it."""
    if isinstance(kind, OrNone):
        return value is None or _takes(kind.kind, value)
    if isinstance(kind, Number) and isinstance(value, int | float):
        spelled = repr(value / kind.scale)  # in its unit: milliseconds are read into seconds
    elif isinstance(value, tuple | frozenset):
        spelled = ",".join(map(str, value))
    else:
        spelled = str(value)
    try:
        read = kind.parse(spelled)
    except ValueError:
        return False
    if isinstance(kind, Number):  # not read == value: milliseconds back to seconds round
        return isinstance(value, int | float)
    return read == value


def _rule(kind: Kind[Any]) -> str:
    """What ``kind`` takes, in a Python caller's words (its ``values`` are the variable's)."""
    if isinstance(kind, OrNone):
        return f"None or {_rule(kind.kind)}"
    if isinstance(kind, Integer):
        if kind.most is not None:
            return f"from {kind.least} to {kind.most}"
        return f"{'even and ' if kind.even else ''}at least {kind.least}"
    if isinstance(kind, Number):
        return f"finite and {'at least 0' if kind.zero else 'positive'}"
    return kind.values


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """How many workers, on which devices, loading what, talking over which transport."""

    model: str = setting(table.MODEL)
    # The role its model fills: ASR_OFFLINE_MODEL's pool is the offline one, and so on.
    kind: Role = Role.STREAMING
    # Offline pools: a CT-Transformer (ASR_PUNC_MODEL) that punctuates every result.
    punc_model: str | None = None
    devices: tuple[str, ...] = setting(table.DEVICES)
    workers_per_device: int = setting(table.WORKERS_PER_DEVICE)
    transport: Transport = setting(table.TRANSPORT)
    threads_per_worker: int = setting(table.THREADS_PER_WORKER)
    # ~1 s of 16 kHz int16: a 600 ms chunk fits one slot.
    slot_bytes: int = setting(table.SLOT_BYTES)
    slots_per_worker: int = setting(table.SLOTS_PER_WORKER)
    max_batch: int = setting(table.MAX_BATCH)
    stream_window: int = setting(table.STREAM_WINDOW)  # results unread before send() waits
    stream_idle_timeout_s: float = setting(table.STREAM_IDLE_TIMEOUT)
    # A re-decoding streaming engine's window (streaming SenseVoice).
    redecode_window_s: float = setting(table.REDECODE_WINDOW)
    start_timeout_s: float = setting(table.WORKER_START_TIMEOUT)
    stop_timeout_s: float = setting(table.WORKER_STOP_TIMEOUT)
    # A worker that owes results and sends none for this long, plus
    # step_seconds_per_audio_second for every second of audio it owes, is taken for hung
    # and killed (hang_timeout_s). A step of max_batch large-model chunks on one CPU core
    # takes ~7 s; an offline decode of a long utterance takes time in proportion to it
    # (its final piece owes the whole utterance: workers.pool.handle says what counts).
    step_timeout_s: float = setting(table.WORKER_STEP_TIMEOUT)
    step_seconds_per_audio_second: float = setting(table.WORKER_STEP_SECONDS_PER_AUDIO_SECOND)
    # WorkerPool.health reports the pool unable to serve once every worker has been lost
    # and has failed to restart at least once, for longer than this.
    unhealthy_after_s: float = setting(table.UNHEALTHY_AFTER)
    # How its model runs (ASR_RUNTIME): the engine its kind has for it (workers.engines.kinds).
    runtime: Runtime = setting(table.RUNTIME)
    # A user's engine class by import path ("package.module:Class"), which serves the model
    # instead of its kind's engine; None: the kind's.
    engine: str | None = None
    onnx_precision: Precision = setting(table.ONNX_PRECISION)
    onnx_mapped_weights: bool = setting(table.ONNX_MAPPED_WEIGHTS)
    # When a worker may hold a step open for more streams' chunks, when it has fewer than
    # max_batch (workers.worker.batching): more waiting means bigger batches, at the cost
    # of latency. "wait": up to batch_wait_s.
    batch_hold: BatchHold = setting(table.BATCH_HOLD)
    batch_wait_s: float = setting(table.BATCH_WAIT_MS)
    # The real-time budget of a chunk from send to result: a step is never held open past
    # the point where the oldest waiting chunk would miss it.
    chunk_deadline_s: float = setting(table.CHUNK_DEADLINE_MS)
    model_cache_dir: str = setting(table.MODEL_CACHE)
    # Unix nice of the pool's workers: ASR_OFFLINE_NICE, the offline pool's (models_file).
    worker_nice: int = setting(table.OFFLINE_NICE)
    # Of a niced pool's workers, how many stay at nice 0 for urgent streams (at most all
    # but one: workers.pool.seats.urgent_seats).
    urgent_workers: int = setting(table.OFFLINE_URGENT_WORKERS)

    def __post_init__(self) -> None:
        check_fields(self)
        gpus = [device for device in self.devices if device.startswith("cuda")]
        if self.onnx_precision == "int8" and self.runtime != "torch" and gpus:
            raise ValueError(
                f"ASR_ONNX_PRECISION=int8 on {gpus[0]}: the int8 graphs' QLinearMatMul has no"
                " kernel in onnxruntime's CUDA provider, so those nodes would run on the CPU"
                " with copies each way; use fp32 on GPUs (int8 is for CPUs)"
            )
        if self.engine is not None and names_a_runtime(self.engine):
            raise ValueError(
                f"engine {self.engine!r} is a runtime: set runtime (ASR_RUNTIME); an engine"
                " is a class, 'package.module:Class', or one of ours by name"
            )

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
        runtime = runtime_of(env, table.RUNTIME, table.ENGINE)
        if not runtime_named(env):
            runtime = default_runtime(table.DEVICES.read(env))
        engine = user_engine(table.ENGINE.read(env))
        return cls(**read_fields(cls, env, runtime=runtime, engine=engine, worker_nice=0))


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


# The runtime of a deployment with a GPU where ASR_RUNTIME names none: ONNX Runtime runs a
# step's streams in one call; PyTorch's funasr decodes one stream per call, and empties
# CUDA's cache after each. On CPUs funasr's own code stays the default: it is the reference.
GPU_RUNTIME: Runtime = "onnx"


def default_runtime(devices: tuple[str, ...]) -> Runtime:
    """The runtime of a pool on ``devices`` where ``ASR_RUNTIME`` names none (a models
    file's table goes further: a GPU in any of its pools makes it every pool's)."""
    return GPU_RUNTIME if any(device.startswith("cuda") for device in devices) else "torch"


def runtime_named(env: Mapping[str, str]) -> bool:
    """Whether ``env`` names the runtime: ``ASR_RUNTIME``, or ``ASR_ENGINE`` holding a
    runtime's old name (``paraformer-onnx``)."""
    engine = env.get(table.ENGINE.name)
    return table.RUNTIME.name in env or (engine is not None and names_a_runtime(engine.strip()))


def names_a_runtime(engine: str) -> bool:
    """Whether ``engine`` is a runtime's name, new (``onnx``) or old (``paraformer-onnx``)."""
    return engine in RUNTIMES or engine in RUNTIME_ALIASES


def user_engine(engine: str | None) -> str | None:
    """``ASR_ENGINE``'s value where it names a user's engine class, not a runtime."""
    return None if engine is None or names_a_runtime(engine) else engine


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
