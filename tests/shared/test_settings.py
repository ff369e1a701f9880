from __future__ import annotations

import pytest

from shared.settings import PoolSettings


def test_pool_settings_from_env() -> None:
    settings = PoolSettings.from_env(
        {
            "ASR_MODEL": "checksum",
            "ASR_DEVICES": "cpu, cpu",
            "ASR_TRANSPORT": "queue",
            "ASR_SLOTS_PER_WORKER": "8",
        }
    )
    assert settings.model == "checksum"
    assert settings.worker_devices == ("cpu", "cpu")
    assert settings.transport == "queue"
    assert settings.slots_per_worker == 8


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ASR_SLOTS_PER_WORKER", "x"),
        ("ASR_THREADS_PER_WORKER", "0"),
        ("ASR_STREAM_IDLE_TIMEOUT", "nan"),
        ("ASR_TRANSPORT", "pipe"),
        ("ASR_DEVICES", "tpu"),
    ],
)
def test_bad_values_name_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=variable):
        PoolSettings.from_env({variable: value})
