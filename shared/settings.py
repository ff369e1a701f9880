"""Settings of the worker pool, read from environment variables (``ASR_*``).

Pure data: resolving a model name to a directory happens in ``workers.models``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

Transport = Literal["shm", "queue"]
PoolKind = Literal["streaming", "offline", "vad"]
Engine = Literal["paraformer", "paraformer-onnx"]
Precision = Literal["fp32", "int8"]
ENGINES: tuple[Engine, ...] = ("paraformer", "paraformer-onnx")
PRECISIONS: tuple[Precision, ...] = ("fp32", "int8")

DEFAULT_MODEL = "paraformer-zh-streaming"


def parse_devices(value: str) -> tuple[str, ...]:
    devices = tuple(d.strip() for d in value.split(",") if d.strip())
    if not devices:
        raise ValueError("ASR_DEVICES must name at least one device, e.g. 'cpu' or 'cuda:0'")
    for device in devices:
        if device != "cpu" and not device.startswith("cuda"):
            raise ValueError(f"unknown device {device!r} in ASR_DEVICES (use cpu or cuda:N)")
    return devices


def env_float(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    what: str,
    valid: Callable[[float], bool],
    requirement: str,
) -> float:
    """``env[name]`` as a finite number that ``valid`` accepts; errors name the variable.

    ``what`` says what the number is ("a number of seconds"); ``requirement`` what a valid
    one is ("a positive number of seconds").
    """
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be {what}, not {raw!r}") from None
    if not (math.isfinite(value) and valid(value)):
        raise ValueError(f"{name} must be {requirement}, not {raw!r}")
    return value


def env_positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    """``env[name]`` as a positive finite number of seconds; errors name the variable."""
    return env_float(
        env,
        name,
        default,
        what="a number of seconds",
        valid=lambda v: v > 0,
        requirement="a positive number of seconds",
    )


def env_positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    """``env[name]`` as an integer of at least 1; errors name the variable."""
    raw = env.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {raw!r}") from None
    if value < 1:
        raise ValueError(f"{name} must be at least 1, not {raw!r}")
    return value


def env_milliseconds(
    env: Mapping[str, str], name: str, default_ms: float, *, allow_zero: bool = False
) -> float:
    """``env[name]``, a number of milliseconds, in seconds; errors name the variable."""
    least = "zero or more" if allow_zero else "positive"
    value = env_float(
        env,
        name,
        default_ms,
        what="a number of milliseconds",
        valid=(lambda v: v >= 0) if allow_zero else (lambda v: v > 0),
        requirement=f"a {least} number of milliseconds",
    )
    return value / 1000


ChoiceT = TypeVar("ChoiceT", bound=str)


def _choice(
    env: Mapping[str, str], name: str, choices: tuple[ChoiceT, ...], default: ChoiceT
) -> ChoiceT:
    raw = env.get(name, default)
    for choice in choices:
        if raw == choice:
            return choice
    raise ValueError(f"{name} must be one of {', '.join(choices)}, not {raw!r}")


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """How many workers, on which devices, loading what, talking over which transport."""

    model: str = DEFAULT_MODEL
    kind: PoolKind = "streaming"  # ASR_OFFLINE_MODEL's pool is "offline", ASR_VAD_MODEL's "vad"
    # Offline pools: a CT-Transformer (ASR_PUNC_MODEL) that punctuates every result.
    punc_model: str | None = None
    devices: tuple[str, ...] = ("cpu",)
    workers_per_device: int = 1
    transport: Transport = "shm"
    threads_per_worker: int = 1
    slot_bytes: int = 32768  # ~1 s of 16 kHz int16: a 600 ms chunk fits one slot
    slots_per_worker: int = 64
    max_batch: int = 32
    stream_window: int = 256  # results a stream may have unread before send() waits
    stream_idle_timeout_s: float = 300.0
    start_timeout_s: float = 300.0
    stop_timeout_s: float = 10.0
    # A worker that owes results and sends none for this long, plus
    # step_seconds_per_audio_second for every second of audio it owes, is taken for hung
    # and killed (hang_timeout_s). A step of max_batch large-model chunks on one CPU core
    # takes ~7 s; an offline decode of a long utterance takes time in proportion to it
    # (its final piece owes the whole utterance: workers.handle says what counts).
    step_timeout_s: float = 60.0
    step_seconds_per_audio_second: float = 1.0
    # WorkerPool.health reports the pool unable to serve once every worker has been lost
    # and has failed to restart at least once, for longer than this.
    unhealthy_after_s: float = 60.0
    # "paraformer" (PyTorch, funasr's own code) or "paraformer-onnx" (ONNX Runtime, streams
    # batched per step; exported once into the model directory). checksum ignores it.
    engine: Engine = "paraformer"
    onnx_precision: Precision = "fp32"
    # How long a worker may hold a step open for more streams' chunks, when it has fewer
    # than max_batch: more waiting means bigger batches, at the cost of latency.
    batch_wait_s: float = 0.0
    # The real-time budget of a chunk from send to result: a step is never held open past
    # the point where the oldest waiting chunk would miss it.
    chunk_deadline_s: float = 0.6
    model_cache_dir: str = field(
        default_factory=lambda: os.path.expanduser("~/.cache/asr-gateway/models")
    )

    def __post_init__(self) -> None:
        if self.transport not in ("shm", "queue"):
            raise ValueError(f"transport must be 'shm' or 'queue', not {self.transport!r}")
        if self.workers_per_device < 1 or self.threads_per_worker < 1:
            raise ValueError("workers per device and threads per worker must be at least 1")
        if self.slot_bytes <= 0 or self.slot_bytes % 2:
            raise ValueError("slot_bytes must be a positive even number")
        if self.slots_per_worker < 1 or self.max_batch < 1 or self.stream_window < 1:
            raise ValueError("slots, max batch and stream window must be at least 1")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if self.onnx_precision not in PRECISIONS:
            raise ValueError(f"ONNX precision must be fp32 or int8, not {self.onnx_precision!r}")
        if self.batch_wait_s < 0:
            raise ValueError("the batch wait cannot be negative")
        if not (
            math.isfinite(self.step_seconds_per_audio_second)
            and self.step_seconds_per_audio_second >= 0
        ):
            raise ValueError("the step seconds per audio second must be zero or more")
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
        defaults = cls()
        transport_name = env.get("ASR_TRANSPORT", defaults.transport)
        transport: Transport
        if transport_name == "shm":
            transport = "shm"
        elif transport_name == "queue":
            transport = "queue"
        else:
            raise ValueError(f"ASR_TRANSPORT must be 'shm' or 'queue', not {transport_name!r}")
        return cls(
            model=env.get("ASR_MODEL", defaults.model),
            devices=parse_devices(env.get("ASR_DEVICES", ",".join(defaults.devices))),
            workers_per_device=env_positive_int(
                env, "ASR_WORKERS_PER_DEVICE", defaults.workers_per_device
            ),
            transport=transport,
            threads_per_worker=env_positive_int(
                env, "ASR_THREADS_PER_WORKER", defaults.threads_per_worker
            ),
            slot_bytes=env_positive_int(env, "ASR_SLOT_BYTES", defaults.slot_bytes),
            slots_per_worker=env_positive_int(
                env, "ASR_SLOTS_PER_WORKER", defaults.slots_per_worker
            ),
            max_batch=env_positive_int(env, "ASR_MAX_BATCH", defaults.max_batch),
            stream_window=env_positive_int(env, "ASR_STREAM_WINDOW", defaults.stream_window),
            stream_idle_timeout_s=env_positive_float(
                env, "ASR_STREAM_IDLE_TIMEOUT", defaults.stream_idle_timeout_s
            ),
            start_timeout_s=env_positive_float(
                env, "ASR_WORKER_START_TIMEOUT", defaults.start_timeout_s
            ),
            stop_timeout_s=env_positive_float(
                env, "ASR_WORKER_STOP_TIMEOUT", defaults.stop_timeout_s
            ),
            step_timeout_s=env_positive_float(
                env, "ASR_WORKER_STEP_TIMEOUT", defaults.step_timeout_s
            ),
            step_seconds_per_audio_second=env_float(
                env,
                "ASR_WORKER_STEP_SECONDS_PER_AUDIO_SECOND",
                defaults.step_seconds_per_audio_second,
                what="a number",
                valid=lambda v: v >= 0,
                requirement="zero or a positive number",
            ),
            unhealthy_after_s=env_positive_float(
                env, "ASR_UNHEALTHY_AFTER", defaults.unhealthy_after_s
            ),
            engine=_choice(env, "ASR_ENGINE", ENGINES, defaults.engine),
            onnx_precision=_choice(env, "ASR_ONNX_PRECISION", PRECISIONS, defaults.onnx_precision),
            batch_wait_s=env_milliseconds(env, "ASR_BATCH_WAIT_MS", 0.0, allow_zero=True),
            chunk_deadline_s=env_milliseconds(env, "ASR_CHUNK_DEADLINE_MS", 600.0),
            model_cache_dir=env.get("ASR_MODEL_CACHE", defaults.model_cache_dir),
        )
