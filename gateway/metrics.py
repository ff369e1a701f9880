"""Prometheus metrics of one app, in its own registry, named after Triton's with our prefix.

Triton's ``nv_inference_count``, ``nv_inference_queue_duration_us`` and
``nv_inference_compute_infer_duration_us`` become ``asr_chunks_total``,
``asr_queue_duration_seconds`` and ``asr_compute_duration_seconds`` (histograms, in seconds as
Prometheus prefers), labelled by model and worker. Worker state is read from the pools at
scrape time. A ``model`` label's values are the served models' and their companions' names,
fixed at start-up: nothing a client sends makes a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.messages import StreamResult
from workers.pool import WorkerStatus

# From 0.5 ms (a chunk taken at once) to 10 s (a badly overloaded pool).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

# From admitted at once to a minute in line.
ADMISSION_WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

StatusSource = Callable[[], Sequence[WorkerStatus]]


class PoolLabels(NamedTuple):
    """A pool's labels: its entry's name, and its workers' prefix ("" streaming, "offline",
    "vad": workers ``N``, ``offline-N``, ``vad-N``)."""

    model: str
    prefix: str

    def worker(self, index: int) -> str:
        return f"{self.prefix}-{index}" if self.prefix else str(index)


PoolSources = Callable[[], Mapping[PoolLabels, StatusSource]]


def resident_bytes(pid: int | None) -> int | None:
    """A process's resident memory (VmRSS), None when it is gone or not started."""
    if pid is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def worker_gpu_memory(worker: WorkerStatus, by_pid: Mapping[int, int]) -> int | None:
    """A CUDA worker's GPU memory: the driver's count for its pid where nvidia-smi lists it
    (exact), else the worker's own (its load's measure, workers.worker.gpu_memory)."""
    if not worker.device.startswith("cuda"):
        return None
    if worker.pid is not None and worker.pid in by_pid:
        return by_pid[worker.pid]
    return worker.gpu_memory_bytes


class WorkerCollector(Collector):
    """Per-worker gauges and the restart counter, read from the pools' status on scrape."""

    def __init__(self, pools: PoolSources, gpu_memory: Callable[[], Mapping[int, int]]) -> None:
        self._pools = pools
        self.gpu_memory = gpu_memory  # bytes by worker pid, as last asked

    def collect(self) -> Iterable[Metric]:
        labels = ["model", "worker", "device"]
        ready = GaugeMetricFamily(
            "asr_worker_ready", "1 when the worker has loaded its model", labels=labels
        )
        streams = GaugeMetricFamily(
            "asr_worker_active_streams", "Streams bound to the worker", labels=labels
        )
        restarts = CounterMetricFamily(
            "asr_worker_restarts", "Times the worker died and was replaced", labels=labels
        )
        memory = GaugeMetricFamily(
            "asr_worker_resident_memory_bytes",
            "The worker process's resident memory (VmRSS)",
            labels=labels,
        )
        gpu_memory = GaugeMetricFamily(
            "asr_worker_gpu_memory_bytes",
            "GPU memory the worker process holds: nvidia-smi's figure for its pid, else (in a"
            " container's PID namespace) the worker's own measure (CUDA workers)",
            labels=labels,
        )
        provider = GaugeMetricFamily(
            "asr_worker_provider",
            "1 for what the worker's models really run on, as its runtime said"
            " (CUDAExecutionProvider, CPUExecutionProvider, torch-cuda, torch-cpu)",
            labels=[*labels, "provider"],
        )
        on_gpu = self.gpu_memory()
        for pool, status in self._pools().items():
            for worker in status():
                values = [pool.model, pool.worker(worker.index), worker.device]
                ready.add_metric(values, 1.0 if worker.state == "ready" else 0.0)
                streams.add_metric(values, worker.active_streams)
                restarts.add_metric(values, worker.restarts)
                rss = resident_bytes(worker.pid)
                if rss is not None:
                    memory.add_metric(values, rss)
                if worker.provider is not None:
                    provider.add_metric([*values, worker.provider], 1.0)
                held = worker_gpu_memory(worker, on_gpu)
                if held is not None:
                    gpu_memory.add_metric(values, held)
        return [ready, streams, restarts, memory, gpu_memory, provider]


class GatewayMetrics:
    """The app's metrics; ``observe_result`` is the worker pool's ``on_result`` callback."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._pools: Mapping[PoolLabels, StatusSource] = {}
        registry = self.registry
        self.sessions_active = Gauge(
            "asr_sessions_active", "WebSocket sessions being served", registry=registry
        )
        self.sessions_max = Gauge(
            "asr_sessions_max",
            "ASR_MAX_SESSIONS: the places sessions take (headroom: this less asr_sessions_active)",
            registry=registry,
        )
        self.sessions = Counter("asr_sessions", "WebSocket sessions admitted", registry=registry)
        self.sessions_refused = Counter(
            "asr_sessions_refused",
            "WebSocket sessions refused at once, by reason: over_capacity, draining,"
            " client_cap, unauthorized, forbidden_origin, audio_budget, unknown_model,"
            " model_full",
            ["reason"],
            registry=registry,
        )
        self.admission_waiting = Gauge(
            "asr_admission_waiters",
            "WebSocket sessions waiting for a place (ASR_ADMISSION_WAIT)",
            registry=registry,
        )
        self.admission_wait = Histogram(
            "asr_admission_wait_seconds",
            "Time a WebSocket session waited for a place, by outcome: admitted, refused",
            ["outcome"],
            buckets=ADMISSION_WAIT_BUCKETS,
            registry=registry,
        )
        self.session_errors = Counter(
            "asr_session_errors",
            "Sessions the server closed with an error, by close code",
            ["code"],
            registry=registry,
        )
        self.sessions_parked = Gauge(
            "asr_sessions_parked",
            "Resumable sessions whose connection dropped, waiting for a resume",
            registry=registry,
        )
        self.resumes = Counter(
            "asr_resumes",
            "Resumes, by outcome: resumed (served), displaced (a later resume of the session"
            " came first), invalid, forbidden, expired, reused, throttled, results_gone,"
            " misdirected, draining",
            ["outcome"],
            registry=registry,
        )
        self.parking_refused = Counter(
            "asr_parking_refused",
            "Resumable sessions ended at a drop because ASR_MAX_PARKED_SESSIONS were parked,"
            " or ASR_MAX_PARKED_PER_CLIENT of the session's client",
            registry=registry,
        )
        # The OpenAI dialect's realtime sessions are sessions too (counted above, with
        # their turns as utterances); these say how many came that way, and what went wrong.
        self.realtime_sessions = Counter(
            "asr_realtime_sessions",
            "Sessions of the OpenAI Realtime endpoint (/v1/realtime), admitted or not",
            registry=registry,
        )
        self.realtime_errors = Counter(
            "asr_realtime_errors",
            "error events sent on /v1/realtime, by OpenAI error code",
            ["code"],
            registry=registry,
        )
        # And Deepgram's live API's (/v1/listen), the same way.
        self.listen_sessions = Counter(
            "asr_listen_sessions",
            "Sessions of Deepgram's live endpoint (/v1/listen), admitted or not",
            registry=registry,
        )
        self.listen_errors = Counter(
            "asr_listen_errors",
            "Errors on /v1/listen: refused handshakes and messages, and closes, by code",
            ["code"],
            registry=registry,
        )
        self.utterances = Counter(
            "asr_utterances", "Utterances started, by mode", ["mode"], registry=registry
        )
        self.chunks = Counter(
            "asr_chunks",
            "Audio pieces processed, by model and worker",
            ["model", "worker"],
            registry=registry,
        )
        self.queue_duration = Histogram(
            "asr_queue_duration_seconds",
            "Time a piece waited between the gateway's send and the worker taking it",
            ["model", "worker"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.compute_duration = Histogram(
            "asr_compute_duration_seconds",
            "Time of the engine step that processed a piece",
            ["model", "worker"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.transcriptions = Counter(
            "asr_transcriptions",
            "File transcriptions (POST /v1/transcribe, /v1/audio/transcriptions), by HTTP status",
            ["status"],
            registry=registry,
        )
        self.transcriptions_active = Gauge(
            "asr_transcriptions_active",
            "File transcriptions holding a place (ASR_TRANSCRIBE_CONCURRENCY): reading their"
            " body, decoding, or streaming their answer",
            registry=registry,
        )
        self.transcription_refusals = Counter(
            "asr_transcription_refusals",
            "File transcriptions refused, by reason: too_large, too_long, bad_rate,"
            " not_wav, fetch_failed, fetch_timeout, private_address, ... (gateway.files.request)",
            ["reason"],
            registry=registry,
        )
        self.batch_size = Histogram(
            "asr_batch_size",
            "Audio pieces in the engine step that processed a piece (one sample per piece)",
            ["model", "worker"],
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.buffered_audio = Gauge(
            "asr_buffered_audio_seconds",
            "Audio held whole in the gateway (offline utterances, 2pass sentences), all"
            " sessions together",
            registry=registry,
        )
        self.buffered_audio_max = Gauge(
            "asr_buffered_audio_max_seconds",
            "ASR_MAX_BUFFERED_SECONDS: past it, new sessions are refused with 1013",
            registry=registry,
        )
        # A served model's own places (max_sessions in ASR_MODELS).
        self.model_sessions_active = Gauge(
            "asr_model_sessions_active",
            "WebSocket sessions on the model",
            ["model"],
            registry=registry,
        )
        self.model_sessions_max = Gauge(
            "asr_model_sessions_max",
            "The model's own cap of sessions (ASR_MODELS' max_sessions; else ASR_MAX_SESSIONS)",
            ["model"],
            registry=registry,
        )
        self.gpu_memory_by_pid: Mapping[int, int] = {}  # set by the /metrics scrape
        registry.register(WorkerCollector(lambda: self._pools, lambda: self.gpu_memory_by_pid))

    def watch_budget(self, held_seconds: Callable[[], float], max_seconds: float) -> None:
        """Read the gateway-wide buffered audio (``gateway.limits.budget``) at each scrape."""
        self.buffered_audio.set_function(held_seconds)
        self.buffered_audio_max.set(max_seconds)

    def watch_workers(self, pools: Mapping[PoolLabels, StatusSource]) -> None:
        """Read worker state from the pools' ``status`` at each scrape, labelled by
        ``pools``' keys."""
        self._pools = pools

    def observe_result(self, pool: PoolLabels, worker: int, result: StreamResult) -> None:
        labels = (pool.model, pool.worker(worker))
        self.chunks.labels(*labels).inc()
        self.queue_duration.labels(*labels).observe(result.queue_ms / 1000.0)
        self.compute_duration.labels(*labels).observe(result.compute_ms / 1000.0)
        self.batch_size.labels(*labels).observe(result.batch_size)

    @property
    def has_cuda_workers(self) -> bool:
        return any(
            worker.device.startswith("cuda")
            for status in self._pools.values()
            for worker in status()
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
