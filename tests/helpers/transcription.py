"""The file-transcription tests' app settings and what they read back: an upload's
answer, a counter in /metrics, an error's message."""

from __future__ import annotations

from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from gateway.settings import GatewaySettings, TranscribeSettings
from shared.settings import PoolSettings

SETTINGS = GatewaySettings(
    pool=PoolSettings(model="checksum", devices=("cpu",)),
    max_session_s=60.0,
    transcribe=TranscribeSettings(max_bytes=4 << 20, fetch_allow_private=True),
)


def upload(client: TestClient, data: bytes, name: str = "a.wav") -> tuple[int, dict[str, object]]:
    response = client.post("/v1/transcribe", files={"file": (name, data, "audio/wav")})
    return response.status_code, response.json()


def counted(client: TestClient, name: str, label: str, value: str) -> float:
    """A counter's sample in /metrics: ``counted(c, "asr_transcriptions", "status", "400")``."""
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == f"{name}_total" and sample.labels.get(label) == value:
                return float(sample.value)
    return 0.0


def refused(client: TestClient, reason: str) -> float:
    return counted(client, "asr_transcription_refusals", "reason", reason)


class _Response(Protocol):
    status_code: int

    def json(self) -> Any: ...


def message_of(response: _Response) -> str:
    error = response.json()["error"]
    assert error["status"] == response.status_code
    return str(error["message"])
