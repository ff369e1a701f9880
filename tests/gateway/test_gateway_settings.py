from __future__ import annotations

import pytest

from gateway.settings import GatewaySettings
from shared.settings import PoolSettings


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
