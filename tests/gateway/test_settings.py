from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import GatewaySettings
from shared.engines import Role
from shared.env import (
    Choice,
    Devices,
    EngineOrRuntime,
    Flag,
    Integer,
    Kind,
    Level,
    Number,
    OrNone,
    RuntimeName,
    Text,
    Words,
)
from shared.settings import PoolSettings
from shared.settings_table import SETTINGS


def test_defaults() -> None:
    settings = GatewaySettings.from_env({})
    assert settings.pool == PoolSettings.from_env({})
    assert settings.max_sessions == 64
    assert settings.max_frame_bytes == 1 << 20
    assert settings.idle_timeout_s == 60.0
    assert settings.max_session_s == 3600.0
    assert settings.drain_timeout_s == 20.0


def test_every_variable_is_read() -> None:
    settings = GatewaySettings.from_env(
        {
            "ASR_MODEL": "checksum",
            "ASR_DEVICES": "cpu,cpu",
            "ASR_MAX_SESSIONS": "3",
            "ASR_MAX_FRAME_BYTES": "4096",
            "ASR_MAX_TEXT_BYTES": "1024",
            "ASR_IDLE_TIMEOUT": "2.5",
            "ASR_MAX_SESSION_SECONDS": "90",
            "ASR_DRAIN_TIMEOUT": "7",
        }
    )
    assert settings == GatewaySettings(
        pool=PoolSettings(model="checksum", devices=("cpu", "cpu")),
        max_sessions=3,
        max_frame_bytes=4096,
        max_text_bytes=1024,
        idle_timeout_s=2.5,
        max_session_s=90.0,
        drain_timeout_s=7.0,
    )


def test_the_session_length_bounds_its_audio() -> None:
    assert GatewaySettings(max_session_s=1.5).max_session_bytes == 48000


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ASR_MAX_SESSIONS", "0"),
        ("ASR_MAX_SESSIONS", "many"),
        ("ASR_MAX_FRAME_BYTES", "-1"),
        ("ASR_IDLE_TIMEOUT", "0"),
        ("ASR_IDLE_TIMEOUT", "soon"),
        ("ASR_MAX_SESSION_SECONDS", "inf"),
        ("ASR_DRAIN_TIMEOUT", "nan"),
        ("ASR_RESUME_WINDOW", "0"),
        ("ASR_MAX_PARKED_SESSIONS", "-1"),
        ("ASR_REPLICA_ID", "a.b"),  # a dot would split the resume token
    ],
)
def test_a_bad_value_names_its_variable(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        GatewaySettings.from_env({name: value})


def test_pool_settings_errors_come_through() -> None:
    with pytest.raises(ValueError, match="ASR_DEVICES"):
        GatewaySettings.from_env({"ASR_DEVICES": ""})


def test_limits_are_checked_when_built_directly() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        GatewaySettings(max_sessions=0)
    with pytest.raises(ValueError, match="positive"):
        GatewaySettings(drain_timeout_s=-1.0)


def test_gc_tuning_is_on_unless_switched_off() -> None:
    assert GatewaySettings.from_env({}).gc_tuning
    assert not GatewaySettings.from_env({"ASR_GC_TUNING": "0"}).gc_tuning


def test_unset_settings_are_the_dataclasses_defaults() -> None:
    assert GatewaySettings.from_env({}) == GatewaySettings()


# With these, the settings of the offline and VAD pools and ASR_PROTECT_STATUS take effect.
BASE = {
    "ASR_OFFLINE_MODEL": "offline",
    "ASR_VAD_MODEL": "vad",
    "ASR_SPEAKER_MODEL": "speaker",
    "ASR_API_KEYS": "key",
}


def _companion(settings: GatewaySettings, role: Role) -> PoolSettings:
    companion = settings.companions.get(role)
    assert companion is not None
    return companion


def _offline(settings: GatewaySettings) -> PoolSettings:
    return _companion(settings, Role.OFFLINE)


def _vad(settings: GatewaySettings) -> PoolSettings:
    return _companion(settings, Role.VAD)


def _speaker(settings: GatewaySettings) -> PoolSettings:
    return _companion(settings, Role.SPEAKER)


Read = Callable[[GatewaySettings], object]

# Each setting: a valid value that is not its default, where it lands, and what it reads as.
EXAMPLES: dict[str, tuple[str, Read, object]] = {
    "ASR_MODELS": (
        str(Path(__file__).parent / "models" / "two_checksum_models.toml"),
        lambda s: [choice.name for choice in s.model_table.choices],
        ["first", "second"],
    ),
    "ASR_MODEL": ("checksum", lambda s: s.pool.model, "checksum"),
    "ASR_DEVICES": ("cpu,cuda:0", lambda s: s.pool.devices, ("cpu", "cuda:0")),
    "ASR_WORKERS_PER_DEVICE": ("2", lambda s: s.pool.workers_per_device, 2),
    "ASR_TRANSPORT": ("queue", lambda s: s.pool.transport, "queue"),
    "ASR_THREADS_PER_WORKER": ("3", lambda s: s.pool.threads_per_worker, 3),
    "ASR_MAX_SESSIONS": ("5", lambda s: s.max_sessions, 5),
    "ASR_MAX_FRAME_BYTES": ("4096", lambda s: s.max_frame_bytes, 4096),
    "ASR_MAX_TEXT_BYTES": ("1024", lambda s: s.max_text_bytes, 1024),
    "ASR_IDLE_TIMEOUT": ("2.5", lambda s: s.idle_timeout_s, 2.5),
    "ASR_CONFIG_TIMEOUT": ("3", lambda s: s.config_timeout_s, 3.0),
    "ASR_FIRST_AUDIO_TIMEOUT": ("4", lambda s: s.first_audio_timeout_s, 4.0),
    "ASR_SEND_TIMEOUT": ("5", lambda s: s.send_timeout_s, 5.0),
    "ASR_MAX_FRAMES_PER_SECOND": ("50", lambda s: s.max_frames_per_s, 50.0),
    "ASR_ADMISSION_WAIT": ("1.5", lambda s: s.admission_wait_s, 1.5),
    "ASR_ADMISSION_QUEUE": ("7", lambda s: s.admission_queue_size, 7),
    "ASR_MAX_SESSION_SECONDS": ("90", lambda s: s.max_session_s, 90.0),
    "ASR_MAX_SEGMENT_SECONDS": ("30", lambda s: s.max_segment_s, 30.0),
    "ASR_MAX_BUFFERED_SECONDS": ("600", lambda s: s.max_buffered_s, 600.0),
    "ASR_PROTECT_STATUS": ("off", lambda s: s.access.protect_status, False),
    "ASR_DRAIN_TIMEOUT": ("7", lambda s: s.drain_timeout_s, 7.0),
    "ASR_DRAIN_DELAY": ("2", lambda s: s.drain_delay_s, 2.0),
    "ASR_AGENT_PORT": ("10096", lambda s: s.agent_port, 10096),
    "ASR_AGENT_HOST": ("0.0.0.0", lambda s: s.agent_host, "0.0.0.0"),
    "ASR_RESUME_WINDOW": ("12.5", lambda s: s.resume_window_s, 12.5),
    "ASR_MAX_PARKED_SESSIONS": ("0", lambda s: s.max_parked_sessions, 0),
    "ASR_MAX_PARKED_PER_CLIENT": ("0", lambda s: s.max_parked_per_client, 0),
    "ASR_MAX_RESUMES_PER_MINUTE": ("6", lambda s: s.max_resumes_per_minute, 6.0),
    "ASR_REPLICA_ID": ("gw-2", lambda s: s.replica_id, "gw-2"),
    "ASR_GC_TUNING": ("off", lambda s: s.gc_tuning, False),
    "ASR_SLOT_BYTES": ("16384", lambda s: s.pool.slot_bytes, 16384),
    "ASR_SLOTS_PER_WORKER": ("8", lambda s: s.pool.slots_per_worker, 8),
    "ASR_MAX_BATCH": ("4", lambda s: s.pool.max_batch, 4),
    "ASR_STREAM_WINDOW": ("16", lambda s: s.pool.stream_window, 16),
    "ASR_STREAM_IDLE_TIMEOUT": ("30", lambda s: s.pool.stream_idle_timeout_s, 30.0),
    "ASR_REDECODE_WINDOW_SECONDS": ("4.8", lambda s: s.pool.redecode_window_s, 4.8),
    "ASR_WORKER_START_TIMEOUT": ("40", lambda s: s.pool.start_timeout_s, 40.0),
    "ASR_WORKER_STOP_TIMEOUT": ("2", lambda s: s.pool.stop_timeout_s, 2.0),
    "ASR_WORKER_STEP_TIMEOUT": ("9", lambda s: s.pool.step_timeout_s, 9.0),
    "ASR_WORKER_STEP_SECONDS_PER_AUDIO_SECOND": (
        "0",
        lambda s: s.pool.step_seconds_per_audio_second,
        0.0,
    ),
    "ASR_UNHEALTHY_AFTER": ("12", lambda s: s.pool.unhealthy_after_s, 12.0),
    "ASR_API_KEYS": ("a, b", lambda s: s.access.api_keys, frozenset({"a", "b"})),
    "ASR_ALLOWED_ORIGINS": (
        "https://A.example/, https://b.example:8443",
        lambda s: s.access.allowed_origins,
        frozenset({"https://a.example", "https://b.example:8443"}),
    ),
    "ASR_MAX_SESSIONS_PER_CLIENT": ("2", lambda s: s.access.max_sessions_per_client, 2),
    "ASR_RUNTIME": ("onnx", lambda s: s.pool.runtime, "onnx"),
    "ASR_ENGINE": ("pkg.engines:Mine", lambda s: s.pool.engine, "pkg.engines:Mine"),
    "ASR_ONNX_PRECISION": ("int8", lambda s: s.pool.onnx_precision, "int8"),
    "ASR_ONNX_MAPPED_WEIGHTS": ("0", lambda s: s.pool.onnx_mapped_weights, False),
    "ASR_BATCH_HOLD": ("due", lambda s: s.pool.batch_hold, "due"),
    "ASR_BATCH_WAIT_MS": ("5", lambda s: s.pool.batch_wait_s, 0.005),
    "ASR_CHUNK_DEADLINE_MS": ("250", lambda s: s.pool.chunk_deadline_s, 0.25),
    "ASR_TRANSCRIBE_MAX_BYTES": ("1000", lambda s: s.transcribe.max_bytes, 1000),
    "ASR_TRANSCRIBE_CONCURRENCY": ("2", lambda s: s.transcribe.concurrency, 2),
    "ASR_FETCH_TIMEOUT": ("3", lambda s: s.transcribe.fetch_timeout_s, 3.0),
    "ASR_UPLOAD_TIMEOUT": ("6", lambda s: s.transcribe.upload_timeout_s, 6.0),
    "ASR_UPLOAD_MIN_BYTES_PER_SECOND": (
        "0",
        lambda s: s.transcribe.upload_min_bytes_per_s,
        0,
    ),
    "ASR_TRANSCRIBE_CONCURRENCY_PER_CLIENT": (
        "3",
        lambda s: s.transcribe.concurrency_per_client,
        3,
    ),
    "ASR_FETCH_ALLOW_PRIVATE": ("on", lambda s: s.transcribe.fetch_allow_private, True),
    "ASR_OFFLINE_MODEL": ("paraformer", lambda s: _offline(s).model, "paraformer"),
    "ASR_OFFLINE_DEVICES": ("cuda:1", lambda s: _offline(s).devices, ("cuda:1",)),
    "ASR_OFFLINE_BATCH_WAIT_MS": ("20", lambda s: _offline(s).batch_wait_s, 0.02),
    "ASR_OFFLINE_RUNTIME": ("onnx", lambda s: _offline(s).runtime, "onnx"),
    "ASR_OFFLINE_ENGINE": ("paraformer-onnx", lambda s: _offline(s).runtime, "onnx"),
    "ASR_OFFLINE_NICE": ("5", lambda s: _offline(s).worker_nice, 5),
    "ASR_OFFLINE_URGENT_WORKERS": ("2", lambda s: _offline(s).urgent_workers, 2),
    "ASR_VAD_MODEL": ("fsmn-vad", lambda s: _vad(s).model, "fsmn-vad"),
    "ASR_VAD_DEVICES": ("cuda:0", lambda s: _vad(s).devices, ("cuda:0",)),
    "ASR_VAD_RUNTIME": ("onnx", lambda s: _vad(s).runtime, "onnx"),
    "ASR_VAD_ENGINE": ("paraformer-onnx", lambda s: _vad(s).runtime, "onnx"),
    "ASR_PUNC_MODEL": ("ct-punc", lambda s: _offline(s).punc_model, "ct-punc"),
    "ASR_SPEAKER_MODEL": ("cam++", lambda s: _speaker(s).model, "cam++"),
    "ASR_SPEAKER_DEVICES": ("cuda:0", lambda s: _speaker(s).devices, ("cuda:0",)),
    "ASR_SENTENCE_PREROLL_MS": ("0", lambda s: s.endpoint.preroll_ms, 0),
    "ASR_ENDPOINT_SILENCE_MS": ("500", lambda s: s.endpoint.silence_ms, 500),
    "ASR_ENDPOINT_MIN_SPEECH_MS": ("120", lambda s: s.endpoint.min_speech_ms, 120),
    "ASR_ENDPOINT_ENERGY_DBFS": ("-35.5", lambda s: s.endpoint.energy_dbfs, -35.5),
    "ASR_HOTWORD_RULES": (
        "/etc/asr/rules.txt",
        lambda s: s.hotword_rules_file,
        "/etc/asr/rules.txt",
    ),
    "ASR_SPEAKERS": ("/etc/asr/speakers.json", lambda s: s.speakers_file, "/etc/asr/speakers.json"),
    "ASR_MODEL_CACHE": ("/tmp/models", lambda s: s.pool.model_cache_dir, "/tmp/models"),
}


def test_every_setting_in_the_table_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(setting.name for setting in SETTINGS)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_setting_is_read_into_the_settings(name: str) -> None:
    raw, read, value = EXAMPLES[name]
    expected = pytest.approx(value) if isinstance(value, float) else value
    assert read(GatewaySettings.from_env(BASE)) != expected
    # A models file names the models itself: the ASR_*MODEL variables may not be set beside it.
    base = {"ASR_API_KEYS": "key"} if name == "ASR_MODELS" else BASE
    assert read(GatewaySettings.from_env({**base, name: raw})) == expected


def _bad_values(kind: Kind[Any]) -> list[str]:
    """Values that ``kind`` refuses (none for a list: every text is one)."""
    if isinstance(kind, OrNone):  # empty is unset
        return [raw for raw in _bad_values(kind.kind) if raw]
    if isinstance(kind, Integer):
        too_big = [] if kind.most is None else [str(kind.most + 1)]
        return ["many", "1.5", str(kind.least - 1), *(["33"] if kind.even else []), *too_big]
    if isinstance(kind, Number | Level):
        return ["soon", "nan", "inf", "0" if isinstance(kind, Level) else "-1"]
    if isinstance(kind, Choice | Flag):
        return ["maybe", ""]
    if isinstance(kind, Devices):
        return ["tpu", ","]
    if isinstance(kind, Text):
        return [""]
    if isinstance(kind, RuntimeName):
        return ["tensorflow", "paraformer-offline", ""]
    if isinstance(kind, EngineOrRuntime):
        return ["paraformer-tensorflow", "pkg.engines:", ":Engine", "pkg engines:Mine"]
    assert isinstance(kind, Words)
    return []


BAD = [(s.name, bad) for s in SETTINGS for bad in _bad_values(s.kind)]


@pytest.mark.parametrize(("name", "raw"), BAD)
def test_every_setting_refuses_bad_values_naming_the_variable(name: str, raw: str) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be .*, not {raw!r}$"):
        GatewaySettings.from_env({**BASE, name: raw})


@pytest.mark.parametrize("name", ["ASR_GC_TUNING", "ASR_FETCH_ALLOW_PRIVATE", "ASR_PROTECT_STATUS"])
@pytest.mark.parametrize("raw", ["1", "0", "true", "false", "YES", "No", "ON", "off"])
def test_booleans_take_eight_spellings(name: str, raw: str) -> None:
    _, read, _ = EXAMPLES[name]
    on = raw.lower() in ("1", "true", "yes", "on")
    assert read(GatewaySettings.from_env({**BASE, name: raw})) is on


def test_a_speaker_model_needs_a_vad_and_runs_one_pytorch_worker_per_device() -> None:
    with pytest.raises(
        ValueError, match="ASR_SPEAKER_MODEL: a speaker model embeds the speech regions"
    ):
        GatewaySettings.from_env({"ASR_SPEAKER_MODEL": "cam++"})
    env = {
        "ASR_VAD_MODEL": "fsmn-vad",
        "ASR_SPEAKER_MODEL": "cam++",
        "ASR_ENGINE": "paraformer-onnx",
        "ASR_WORKERS_PER_DEVICE": "3",
    }
    speaker = _speaker(GatewaySettings.from_env(env))
    assert (speaker.kind, speaker.runtime, speaker.workers_per_device) == ("speaker", "torch", 1)
    assert speaker.devices == ("cpu",)
    choice = GatewaySettings.from_env(env).model_table.default_choice
    assert choice.companions[Role.SPEAKER].settings == speaker


@pytest.mark.parametrize("old", ["paraformer-onnx", "onnx"])
def test_asr_engine_is_the_old_name_of_asr_runtime(old: str) -> None:
    env = {"ASR_ENGINE": old, "ASR_OFFLINE_MODEL": "paraformer", "ASR_VAD_MODEL": "fsmn-vad"}
    settings = GatewaySettings.from_env(env)
    assert (settings.pool.runtime, settings.pool.engine) == ("onnx", None)
    assert (_offline(settings).runtime, _vad(settings).runtime) == ("onnx", "onnx")
    both = GatewaySettings.from_env({**env, "ASR_RUNTIME": "onnx"})
    assert both.pool.runtime == "onnx"
    with pytest.raises(ValueError, match="ASR_ENGINE is the old name of ASR_RUNTIME"):
        GatewaySettings.from_env({**env, "ASR_RUNTIME": "torch"})
    with pytest.raises(ValueError, match="ASR_OFFLINE_ENGINE is the old name"):
        GatewaySettings.from_env(
            {**env, "ASR_OFFLINE_ENGINE": "paraformer", "ASR_OFFLINE_RUNTIME": "onnx"}
        )


def test_a_users_engine_serves_the_streaming_model_alone() -> None:
    env = {
        "ASR_ENGINE": "pkg.engines:Mine",
        "ASR_RUNTIME": "onnx",
        "ASR_OFFLINE_MODEL": "paraformer",
        "ASR_VAD_MODEL": "fsmn-vad",
        "ASR_SPEAKER_MODEL": "cam++",
    }
    settings = GatewaySettings.from_env(env)
    assert (settings.pool.engine, settings.pool.runtime) == ("pkg.engines:Mine", "onnx")
    companions = (_offline(settings), _vad(settings), _speaker(settings))
    assert [pool.engine for pool in companions] == [None, None, None]


def test_the_offline_and_vad_pools_hold_by_the_wait_whatever_the_streaming_pool_does() -> None:
    env = {
        "ASR_BATCH_HOLD": "due",
        "ASR_OFFLINE_MODEL": "paraformer",
        "ASR_VAD_MODEL": "fsmn-vad",
    }
    settings = GatewaySettings.from_env(env)
    assert settings.pool.batch_hold == "due"
    assert _offline(settings).batch_hold == "wait"
    assert _vad(settings).batch_hold == "wait"
