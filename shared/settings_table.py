"""Every ``ASR_*`` setting: its variable, type, default, what it takes and what it means.

The settings dataclasses (``PoolSettings``, ``GatewaySettings``, ``AccessSettings``,
``TranscribeSettings``) name each field's entry (``shared.settings.setting``): its default,
the variable their ``from_env`` reads, and its rule, the entry's kind (``AT_LEAST_1``,
``Choice(TRANSPORTS)``), which holds for a dataclass built in Python as well. The settings
table of docs/settings.md is rendered from ``SETTINGS`` (``python -m shared.settings_readme``
rewrites it; a test checks that it is up to date).
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from shared.engines import Precision
from shared.env import (
    Choice,
    Devices,
    EngineOrRuntime,
    Flag,
    Integer,
    Level,
    Number,
    OrNone,
    RuntimeName,
    Setting,
    Text,
    Words,
)

Transport = Literal["shm", "queue"]
# How a worker holds a step open for more chunks (workers.worker.batching).
BatchHold = Literal["due", "wait"]
TRANSPORTS: tuple[Transport, ...] = ("shm", "queue")
BATCH_HOLDS: tuple[BatchHold, ...] = ("due", "wait")
PRECISIONS: tuple[Precision, ...] = ("fp32", "int8")
DEFAULT_MODEL = "paraformer-zh-streaming"

AT_LEAST_1 = Integer(1)
AT_LEAST_0 = Integer(0)
NICENESS = Integer(0, most=19)  # Unix nice values a process may give itself
SECONDS = Number("seconds", zero=False)
SECONDS_OR_0 = Number("seconds", zero=True)
MILLISECONDS = Number("milliseconds", zero=False, scale=0.001)  # read into seconds
MILLISECONDS_OR_0 = Number("milliseconds", zero=True, scale=0.001)
FLAG = Flag()
MODEL_NAME = Text("a model")
DEVICES_LIST = Devices()


class Matching(Text):
    """Text that ``pattern`` matches whole."""

    def __init__(self, pattern: str, values: str) -> None:
        super().__init__(values)
        self.pattern = re.compile(pattern)

    def parse(self, raw: str) -> str:
        if not self.pattern.fullmatch(raw):
            raise ValueError(raw)
        return raw


# Several models in one service (gateway.models): a TOML file of named models, each with
# its own pools; without it, the settings below describe the one model served.
MODELS = Setting(
    "ASR_MODELS",
    OrNone(Text("a file")),
    None,
    'a models file (TOML: `default = "NAME"`, one `[models.NAME]` table per model, keys'
    " the per-model settings below in lower case without `ASR_`, plus `offline`, `vad`,"
    " `punc` and `speaker` naming companion entries, and `engine` a user's engine class):"
    " docs/several-models.md. Unset: `ASR_MODEL` and its companions' variables make the one"
    " model served, read as a one-entry file",
)

# The worker pool (shared.settings.PoolSettings).
MODEL = Setting(
    "ASR_MODEL",
    MODEL_NAME,
    DEFAULT_MODEL,
    "a hub id (looked up in the ModelScope cache, else downloaded), a local model directory,"
    " `synthetic:tiny` / `synthetic:large` (random weights, real architecture, built once"
    " into `ASR_MODEL_CACHE`), or `checksum` (model-free: each result is `<samples>:<crc32>`"
    " of the audio so far). When the default model is neither cached nor downloadable,"
    " start-up fails at once with one line naming the way out.",
)
DEVICES = Setting(
    "ASR_DEVICES",
    DEVICES_LIST,
    ("cpu",),
    "comma-separated devices, one worker each: `cpu,cpu`, `cuda:0,cuda:1`",
)
WORKERS_PER_DEVICE = Setting(
    "ASR_WORKERS_PER_DEVICE", AT_LEAST_1, 1, "workers (model instances) per device"
)
TRANSPORT = Setting(
    "ASR_TRANSPORT",
    Choice(TRANSPORTS),
    "shm",
    "`shm` (a shared-memory slab per worker) or `queue` (audio pickled through a"
    " multiprocessing queue)",
)
THREADS_PER_WORKER = Setting(
    "ASR_THREADS_PER_WORKER", AT_LEAST_1, 1, "torch threads in each worker"
)

# Sessions (gateway.settings.GatewaySettings).
MAX_SESSIONS = Setting(
    "ASR_MAX_SESSIONS",
    AT_LEAST_1,
    64,
    "WebSocket sessions served at once; the next is refused at once with 1013",
)
MAX_FRAME_BYTES = Setting(
    "ASR_MAX_FRAME_BYTES",
    AT_LEAST_1,
    1 << 20,
    "largest binary frame (32 s of audio); larger closes with 1009. Keep it under uvicorn's"
    " `--ws-max-size` (16 MiB), else uvicorn closes first, without our error frame",
)
MAX_TEXT_BYTES = Setting(
    "ASR_MAX_TEXT_BYTES", AT_LEAST_1, 65536, "largest text frame (UTF-8); larger closes with 1009"
)
IDLE_TIMEOUT = Setting(
    "ASR_IDLE_TIMEOUT",
    SECONDS,
    60.0,
    "seconds a session may go without audio (20 ms of it) or a result it waited for, while"
    " the server owes it nothing (mid-utterance, or between utterances); then 1008. Configs"
    " and ends do not put it off",
)
CONFIG_TIMEOUT = Setting(
    "ASR_CONFIG_TIMEOUT",
    SECONDS,
    10.0,
    "seconds from admission to the first config; then 1008 (a silent connection cannot hold"
    " a place)",
)
FIRST_AUDIO_TIMEOUT = Setting(
    "ASR_FIRST_AUDIO_TIMEOUT",
    SECONDS,
    30.0,
    "seconds from each config to its first audio; then 1008 (FunASR's HTML5 page sends its"
    " config on Connect and opens the microphone on Start, after the browser's prompt)",
)
SEND_TIMEOUT = Setting(
    "ASR_SEND_TIMEOUT",
    SECONDS,
    10.0,
    "seconds one result may wait on a client that does not read; then 1008 (Slow readers)",
)
MAX_FRAMES_PER_SECOND = Setting(
    "ASR_MAX_FRAMES_PER_SECOND",
    Number("frames a second", zero=False),
    200.0,
    "frames a second per session, in bursts of one second's worth: a text frame counts 1, a"
    " binary frame 1 less its share of 20 ms of audio (frames of 20 ms or more are free: the"
    " workers' backpressure paces them). Past it: error frame, 1008",
)
ADMISSION_WAIT = Setting(
    "ASR_ADMISSION_WAIT",
    SECONDS_OR_0,
    0.0,
    "seconds a session over `ASR_MAX_SESSIONS` may wait for a place, first come first"
    " served; then 1013. `0`: refused at once",
)
ADMISSION_QUEUE = Setting(
    "ASR_ADMISSION_QUEUE",
    OrNone(AT_LEAST_1),
    None,
    "how many may wait at once; the next gets 1013 at once",
    shown="`ASR_MAX_SESSIONS`",
)
MAX_SESSION_SECONDS = Setting(
    "ASR_MAX_SESSION_SECONDS",
    SECONDS,
    3600.0,
    "the longest a session may last, in wall-clock time and in seconds of audio sent; then"
    " 1008. Also bounds an offline utterance's buffer",
)
MAX_SEGMENT_SECONDS = Setting(
    "ASR_MAX_SEGMENT_SECONDS",
    SECONDS,
    60.0,
    "offline utterances, `/v1/transcribe` files and 2pass sentences longer than this are"
    " decoded in segments cut at pauses (Long audio)",
)
MAX_BUFFERED_SECONDS = Setting(
    "ASR_MAX_BUFFERED_SECONDS",
    OrNone(SECONDS),
    None,
    "seconds of audio all sessions together may hold in the gateway; past it, 1013. Default:"
    " an eighth of the machine's memory, at 64 kB of it per second held (the buffer, and its"
    " copy on the way to the workers): 24 GiB gives ~14 hours",
    shown="memory / 8 / 64 kB",
)
PROTECT_STATUS = Setting(
    "ASR_PROTECT_STATUS",
    OrNone(FLAG),
    None,
    "`/metrics` and `/readyz`'s details need a key; `0` opens them. Default: on exactly when"
    " `ASR_API_KEYS` is set",
    shown="on with `ASR_API_KEYS`",
)
DRAIN_TIMEOUT = Setting(
    "ASR_DRAIN_TIMEOUT",
    SECONDS,
    20.0,
    "on SIGTERM / Ctrl-C, seconds live sessions get to finish their utterance before they are"
    " closed with 1012",
)
DRAIN_DELAY = Setting(
    "ASR_DRAIN_DELAY",
    SECONDS_OR_0,
    0.0,
    "on SIGTERM / Ctrl-C, seconds of telling load balancers first (`/readyz` 503, the agent"
    " says `drain`) while new sessions are still admitted; then the drain. Set it above the"
    " balancer's check interval, so that no session arriving meanwhile is refused",
)
AGENT_PORT = Setting(
    "ASR_AGENT_PORT",
    OrNone(Integer(1, most=65535)),
    None,
    "a TCP port answering HAProxy's `agent-check` with this replica's free places as a"
    " weight (`ready up 75%`), `drain` while draining, `down` with no ready worker",
    shown="off",
)
AGENT_HOST = Setting(
    "ASR_AGENT_HOST",
    OrNone(Text("an address to listen on")),
    None,
    "where `ASR_AGENT_PORT` listens: `0.0.0.0` (or `::`) for a balancer on another host."
    " Bare uvicorn does not tell its app its `--host`, so there the default is the"
    " loopback only",
    shown="`python -m gateway`'s `--host`; `127.0.0.1` under bare uvicorn",
)
RESUME_WINDOW = Setting(
    "ASR_RESUME_WINDOW",
    SECONDS,
    30.0,
    'seconds a resumable session (`"resumable": true`) stays parked after its connection'
    " drops: its streams, its place and its unsent results wait for a resume; then it closes"
    " as if the client had left",
)
MAX_PARKED_SESSIONS = Setting(
    "ASR_MAX_PARKED_SESSIONS",
    AT_LEAST_0,
    64,
    "resumable sessions parked at once (each holds its place, its streams and up to 256 KiB"
    " of results, measured); a drop past it closes the session (`0`: no resumes)",
)
MAX_PARKED_PER_CLIENT = Setting(
    "ASR_MAX_PARKED_PER_CLIENT",
    AT_LEAST_0,
    8,
    "resumable sessions of one client address parked at once, so that one client cannot take"
    " every parking place; a drop past it closes that session (`0`: no share of its own)",
)
MAX_RESUMES_PER_MINUTE = Setting(
    "ASR_MAX_RESUMES_PER_MINUTE",
    Number("resumes", zero=False),
    30.0,
    "resumes one session may take a minute, 5 of them at once; one more is refused with 4429"
    " (the token still works a moment later): each resume sends its unacknowledged results"
    " again",
)
REPLICA_ID = Setting(
    "ASR_REPLICA_ID",
    OrNone(Matching(r"[A-Za-z0-9_-]{1,64}", "letters, digits, `-`, `_`, at most 64")),
    None,
    "this replica's name in resume tokens, so that a proxy routes a resume back to it",
    shown="the host name",
)
GC_TUNING = Setting(
    "ASR_GC_TUNING",
    FLAG,
    True,
    "after start-up, `gc.freeze()` the heap and raise the collector's thresholds so that full"
    " collections (pauses of tens of ms with hundreds of sessions) become rare; `0` keeps"
    " CPython's defaults. See `shared/gc_tuning.py` and BENCHMARKS.md",
)

# Workers (PoolSettings).
SLOT_BYTES = Setting(
    "ASR_SLOT_BYTES",
    Integer(2, even=True),
    32768,
    "size of one slab slot (a chunk larger than a slot is sent in slot-sized pieces)",
)
SLOTS_PER_WORKER = Setting(
    "ASR_SLOTS_PER_WORKER",
    AT_LEAST_1,
    64,
    "slab slots per worker: audio in flight to it, the pipeline's backpressure",
)
MAX_BATCH = Setting(
    "ASR_MAX_BATCH", AT_LEAST_1, 32, "most chunks a worker hands its engine in one step"
)
STREAM_WINDOW = Setting(
    "ASR_STREAM_WINDOW", AT_LEAST_1, 256, "results a stream may have unread before `send` waits"
)
STREAM_IDLE_TIMEOUT = Setting(
    "ASR_STREAM_IDLE_TIMEOUT",
    SECONDS,
    300.0,
    "seconds after which a worker drops a stream that gets no audio",
)
REDECODE_WINDOW = Setting(
    "ASR_REDECODE_WINDOW_SECONDS",
    SECONDS,
    8.0,
    "most audio a streaming SenseVoice partial decodes again (docs/models.md)",
)
WORKER_START_TIMEOUT = Setting(
    "ASR_WORKER_START_TIMEOUT", SECONDS, 300.0, "seconds a worker may take to load its model"
)
WORKER_STOP_TIMEOUT = Setting(
    "ASR_WORKER_STOP_TIMEOUT",
    SECONDS,
    10.0,
    "seconds workers get to exit at shutdown before they are killed",
)
WORKER_STEP_TIMEOUT = Setting(
    "ASR_WORKER_STEP_TIMEOUT",
    SECONDS,
    60.0,
    "seconds a worker that owes results may send none before it is taken for hung, killed and"
    " replaced (its sessions get 1011), plus the next setting's allowance. A step of"
    " `ASR_MAX_BATCH` large-model chunks takes ~7 s on one CPU core; allow for your slowest"
    " step",
)
WORKER_STEP_SECONDS_PER_AUDIO_SECOND = Setting(
    "ASR_WORKER_STEP_SECONDS_PER_AUDIO_SECOND",
    SECONDS_OR_0,
    1.0,
    "added to the hang timeout for every second of audio the worker owes (an offline decode"
    " takes time in proportion to its audio)",
)
UNHEALTHY_AFTER = Setting(
    "ASR_UNHEALTHY_AFTER",
    SECONDS,
    60.0,
    "seconds every worker of a pool may have failed to restart before `/healthz` answers 503",
)

# Access (gateway.limits.access.AccessSettings).
API_KEYS = Setting(
    "ASR_API_KEYS",
    Words(),
    frozenset(),
    "comma-separated API keys; when set, every WebSocket handshake must present one"
    " (`Authorization: Bearer KEY` or `?token=KEY`), else HTTP 401",
)
ALLOWED_ORIGINS = Setting(
    "ASR_ALLOWED_ORIGINS",
    Words(),
    frozenset(),
    "comma-separated origins (`https://host[:port]`) whose pages may connect; another"
    " `Origin` gets HTTP 403",
)
MAX_SESSIONS_PER_CLIENT = Setting(
    "ASR_MAX_SESSIONS_PER_CLIENT",
    AT_LEAST_0,
    0,
    "live sessions per client address (`0`: no cap); the next closes with 1008",
)

# Runtimes and engines (PoolSettings).
RUNTIME = Setting(
    "ASR_RUNTIME",
    RuntimeName(),
    "torch",
    "how the models run, every pool's unless its own says otherwise: `torch` (funasr's"
    " PyTorch code), `onnx` (ONNX Runtime, batched steps, on an export made once at"
    " start-up: the streaming and offline Paraformers, SenseVoice, the FSMN-VAD and the"
    " punctuation; SeACo, BiCif and CAM++ stay on PyTorch) or `openvino` (the streaming"
    " Paraformer's export under OpenVINO on the CPU, `pip install openvino`; the rest as"
    " `onnx`). Unset: `onnx` where `ASR_DEVICES` names a GPU, else `torch`"
    " (docs/workers.md, GPUs). Each model kind's engine per runtime: `workers/engines/kinds.py`",
    shown="`torch`; `onnx` on GPUs",
)
ENGINE = Setting(
    "ASR_ENGINE",
    OrNone(EngineOrRuntime()),
    None,
    "a user's engine class by import path (`package.module:Class`, docs/adding-a-model.md),"
    " which serves the model instead of its kind's; the old name of `ASR_RUNTIME` where it"
    " holds a runtime's old name (`paraformer`, `paraformer-onnx`, `paraformer-openvino`)",
)
ONNX_PRECISION = Setting(
    "ASR_ONNX_PRECISION",
    Choice(PRECISIONS),
    "fp32",
    "`fp32` (text equal to PyTorch's with look-back 0/0) or `int8` (static quantization"
    " calibrated at export: smaller, faster on CPUs, close to fp32, batch-invariant; refused"
    " on GPUs, where onnxruntime's CUDA provider cannot run its QLinearMatMul)",
)
ONNX_MAPPED_WEIGHTS = Setting(
    "ASR_ONNX_MAPPED_WEIGHTS",
    FLAG,
    True,
    "ONNX Runtime workers on CPUs map their graphs' weights, prepacked, from one file beside"
    " the export (`mapped/`, made by the first worker to start): every worker of a model"
    " shares one copy through the page cache, at the same speed; `0`: each holds its own (a"
    " read-only model directory falls back to that by itself)",
)
BATCH_HOLD = Setting(
    "ASR_BATCH_HOLD",
    Choice(BATCH_HOLDS),
    "wait",
    "when a streaming worker holds a step open for more streams' chunks: `wait`, for whatever"
    " comes within `ASR_BATCH_WAIT_MS` (0, the default: take what is waiting); `due`, while"
    " another stream's next chunk is due (a real-time client sends one a chunk's duration after"
    " the last), as long as the worker is busy, within `ASR_CHUNK_DEADLINE_MS`: up to 16 % less"
    " CPU per audio hour, for up to 90 ms more latency per chunk (docs/workers.md)",
)
BATCH_WAIT_MS = Setting(
    "ASR_BATCH_WAIT_MS",
    MILLISECONDS_OR_0,
    0.0,
    "with `ASR_BATCH_HOLD=wait`, how long a worker may hold a step open for more streams'"
    " chunks (0: take what is waiting)",
)
CHUNK_DEADLINE_MS = Setting(
    "ASR_CHUNK_DEADLINE_MS",
    MILLISECONDS,
    0.3,
    "a held step starts early enough to answer its oldest chunk within this of its send (the"
    " step's own time predicted from recent steps); a `due` hold spends as much of it as the"
    " worker is busy: none below a quarter of its time in steps, all from three quarters",
)

# /v1/transcribe (gateway.files.request.TranscribeSettings).
TRANSCRIBE_MAX_BYTES = Setting(
    "ASR_TRANSCRIBE_MAX_BYTES",
    AT_LEAST_1,
    50 << 20,
    "largest file `/v1/transcribe` takes, uploaded or fetched (50 MiB); larger is 413",
)
TRANSCRIBE_CONCURRENCY = Setting(
    "ASR_TRANSCRIBE_CONCURRENCY",
    AT_LEAST_1,
    4,
    "file transcriptions at once (`/v1/transcribe`, `/v1/audio/transcriptions`), each from its"
    " body's first byte; the next gets 429",
)
TRANSCRIBE_CONCURRENCY_PER_CLIENT = Setting(
    "ASR_TRANSCRIBE_CONCURRENCY_PER_CLIENT",
    AT_LEAST_0,
    2,
    "of those, at most this many from one client address; the next gets 429 (`0`: no share"
    " of its own)",
)
FETCH_TIMEOUT = Setting(
    "ASR_FETCH_TIMEOUT", SECONDS, 30.0, "seconds to fetch a URL, redirects included"
)
UPLOAD_TIMEOUT = Setting(
    "ASR_UPLOAD_TIMEOUT",
    SECONDS,
    120.0,
    "seconds an upload's body may take to arrive; then 408",
)
UPLOAD_MIN_BYTES_PER_SECOND = Setting(
    "ASR_UPLOAD_MIN_BYTES_PER_SECOND",
    Integer(0),
    16384,
    "the least an upload's body may average once it has had `UPLOAD_GRACE_S` (5 s) to"
    " start; slower gets 408, so that holding a place costs a client bandwidth (`0`: no"
    " minimum)",
)
FETCH_ALLOW_PRIVATE = Setting(
    "ASR_FETCH_ALLOW_PRIVATE",
    FLAG,
    False,
    "`1` lets `/v1/transcribe` fetch from private, loopback and link-local addresses",
)

# The offline, VAD and punctuation pools (GatewaySettings).
OFFLINE_MODEL = Setting(
    "ASR_OFFLINE_MODEL",
    OrNone(MODEL_NAME),
    None,
    "an offline Paraformer for the `offline` mode, `2pass-offline` and `/v1/transcribe` (a"
    " second pool): a directory, a hub id or short name (`paraformer`, `paraformer-zh` /"
    " `seaco-paraformer`), `synthetic:tiny|large`, or `synthetic-seaco:tiny|large` (a"
    " SeACo-Paraformer, which takes hotwords); unset: the streaming model decodes them",
)
OFFLINE_DEVICES = Setting(
    "ASR_OFFLINE_DEVICES",
    OrNone(DEVICES_LIST),
    None,
    "devices of the offline pool, one worker each",
    shown="`ASR_DEVICES`",
)
OFFLINE_BATCH_WAIT_MS = Setting(
    "ASR_OFFLINE_BATCH_WAIT_MS",
    MILLISECONDS_OR_0,
    0.05,
    "how long an offline worker holds a step open for more utterances ending",
)
OFFLINE_RUNTIME = Setting(
    "ASR_OFFLINE_RUNTIME",
    OrNone(RuntimeName()),
    None,
    "the offline pool's runtime, where it should differ from the streaming pool's"
    " (`ASR_OFFLINE_ENGINE`: its old name)",
    shown="`ASR_RUNTIME`",
)
OFFLINE_ENGINE = Setting(  # the old name of ASR_OFFLINE_RUNTIME
    "ASR_OFFLINE_ENGINE", OrNone(RuntimeName()), None, "the old name of `ASR_OFFLINE_RUNTIME`"
)
OFFLINE_NICE = Setting(
    "ASR_OFFLINE_NICE",
    NICENESS,
    0,
    "how much lower the offline pool's workers run than the others (Unix nice; 10: a"
    " sentence's decode yields the cores to streaming chunks, and its 2pass-offline result"
    " comes later), but for `ASR_OFFLINE_URGENT_WORKERS` (docs/workers.md)",
)
OFFLINE_URGENT_WORKERS = Setting(
    "ASR_OFFLINE_URGENT_WORKERS",
    AT_LEAST_0,
    1,
    "with `ASR_OFFLINE_NICE`, how many of the offline pool's workers stay at nice 0 to"
    " decode each 2pass utterance's last sentence, whose result is the final (at most all"
    " but one; the others decode the earlier sentences, offline-mode utterances and files)",
)
VAD_MODEL = Setting(
    "ASR_VAD_MODEL",
    OrNone(MODEL_NAME),
    None,
    "an FSMN-VAD that finds 2pass sentence ends (a third pool); unset: the energy endpointer below",
)
VAD_DEVICES = Setting(
    "ASR_VAD_DEVICES", DEVICES_LIST, ("cpu",), "devices of the VAD pool, one worker each"
)
VAD_RUNTIME = Setting(
    "ASR_VAD_RUNTIME",
    OrNone(RuntimeName()),
    None,
    "the VAD pool's runtime (`onnx`: the vectorised FSMN-VAD), where it should differ from"
    " the streaming pool's (`ASR_VAD_ENGINE`: its old name)",
    shown="`ASR_RUNTIME`",
)
VAD_ENGINE = Setting(  # the old name of ASR_VAD_RUNTIME
    "ASR_VAD_ENGINE", OrNone(RuntimeName()), None, "the old name of `ASR_VAD_RUNTIME`"
)
PUNC_MODEL = Setting(
    "ASR_PUNC_MODEL",
    OrNone(MODEL_NAME),
    None,
    "a CT-Transformer that punctuates the offline model's results (needs `ASR_OFFLINE_MODEL`)",
)
SPEAKER_MODEL = Setting(
    "ASR_SPEAKER_MODEL",
    OrNone(MODEL_NAME),
    None,
    "a CAM++ speaker model (`cam++`, a directory, or `synthetic-campplus:tiny`) that labels the"
    " speakers of files and offline utterances that ask (`speakers`); a pool of its own, and"
    " needs `ASR_VAD_MODEL`, whose speech regions it embeds",
)
SPEAKER_DEVICES = Setting(
    "ASR_SPEAKER_DEVICES", DEVICES_LIST, ("cpu",), "devices of the speaker pool, one worker each"
)
SPEAKERS = Setting(
    "ASR_SPEAKERS",
    OrNone(Text("a file")),
    None,
    "the server's known speakers: a JSON file of names and voiceprints (`python -m"
    " gateway.ops.enrol` makes it from WAV clips), read at start; they name the speakers of"
    " OpenAI's `diarized_json` and of a FunASR `offline` result with `spk` that sound like them"
    " (docs/models.md, Speakers by name)",
)

# 2pass sentences (gateway.audio.endpointer.EndpointSettings).
SENTENCE_PREROLL_MS = Setting(
    "ASR_SENTENCE_PREROLL_MS",
    MILLISECONDS_OR_0,
    0.3,
    "2pass: a sentence's offline pass starts this long before its detected speech",
)
ENDPOINT_SILENCE_MS = Setting(
    "ASR_ENDPOINT_SILENCE_MS", MILLISECONDS, 0.8, "2pass: the pause that ends a sentence"
)
ENDPOINT_MIN_SPEECH_MS = Setting(
    "ASR_ENDPOINT_MIN_SPEECH_MS",
    MILLISECONDS,
    0.3,
    "2pass: the speech a sentence needs before a pause can end it",
)
ENDPOINT_ENERGY_DBFS = Setting(
    "ASR_ENDPOINT_ENERGY_DBFS",
    Level(),
    -40.0,
    "2pass: the RMS level (dBFS, 30 ms frames) above which a frame is speech",
)

HOTWORD_RULES = Setting(
    "ASR_HOTWORD_RULES",
    OrNone(Text("a file")),
    None,
    "text corrections of every result, partials too: a file of `wrong=>right` lines (`#`"
    " comments), applied with each session's own (a hotword written `wrong=>right`) and its"
    " Chinese hotwords' pinyin matching (docs/protocol.md, hotwords)",
)

MODEL_CACHE = Setting(
    "ASR_MODEL_CACHE",
    Text("a directory"),
    os.path.expanduser("~/.cache/asr-gateway/models"),
    "where synthetic models are built",
    shown="`~/.cache/asr-gateway/models`",
)

# What a models file's entry may set, as ``name[4:].lower()`` (``devices``, ``max_batch``):
# the pool's settings, and the model's own cap of sessions. The rest stay gateway-wide.
PER_MODEL: tuple[Setting[Any], ...] = (
    MODEL,
    DEVICES,
    WORKERS_PER_DEVICE,
    TRANSPORT,
    THREADS_PER_WORKER,
    MAX_SESSIONS,
    SLOT_BYTES,
    SLOTS_PER_WORKER,
    MAX_BATCH,
    STREAM_WINDOW,
    STREAM_IDLE_TIMEOUT,
    REDECODE_WINDOW,
    WORKER_START_TIMEOUT,
    WORKER_STOP_TIMEOUT,
    WORKER_STEP_TIMEOUT,
    WORKER_STEP_SECONDS_PER_AUDIO_SECOND,
    UNHEALTHY_AFTER,
    RUNTIME,
    ENGINE,
    ONNX_PRECISION,
    ONNX_MAPPED_WEIGHTS,
    BATCH_HOLD,
    BATCH_WAIT_MS,
    CHUNK_DEADLINE_MS,
)

# Every setting, in the settings page's order: the order above.
SETTINGS: tuple[Setting[Any], ...] = tuple(
    value for value in dict(globals()).values() if isinstance(value, Setting)
)
