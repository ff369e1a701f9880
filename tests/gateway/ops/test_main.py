"""``python -m gateway``'s options: uvicorn's own, read by uvicorn's click parameters."""

from __future__ import annotations

from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

import gateway.__main__ as entry
from gateway.app import Gateway


def record(monkeypatch: pytest.MonkeyPatch, *, starts: bool = True) -> list[uvicorn.Config]:
    """The server replaced by one that keeps what it would have served and serves nothing."""
    served: list[uvicorn.Config] = []

    class Recorded:
        def __init__(self, config: uvicorn.Config, app: Any) -> None:
            self.config = config
            self.started = starts

        def run(self) -> None:
            served.append(self.config)

    monkeypatch.setattr(entry, "DrainingServer", Recorded)
    return served


@pytest.fixture
def configs(monkeypatch: pytest.MonkeyPatch) -> list[uvicorn.Config]:
    return record(monkeypatch)


def test_uvicorns_options_are_taken_as_uvicorn_takes_them(configs: list[uvicorn.Config]) -> None:
    result = CliRunner().invoke(
        entry.main,
        [
            "--host",
            "0.0.0.0",
            "--port",
            "10095",
            "--ws-per-message-deflate",
            "false",
            "--ws-max-size",
            "2097152",
            "--ws-ping-timeout",
            "600",
            "--limit-concurrency",
            "100",
            "--header",
            "x-served-by:gateway",
        ],
    )
    assert result.exit_code == 0, result.output
    (config,) = configs
    assert (config.host, config.port) == ("0.0.0.0", 10095)
    assert config.ws_per_message_deflate is False
    assert config.ws_max_size == 2097152
    assert config.ws_ping_timeout == 600.0
    assert config.limit_concurrency == 100
    assert config.headers == [("x-served-by", "gateway")]
    assert config.lifespan == "on"
    assert isinstance(config.app, Gateway)


def test_uvicorns_environment_variables_set_them_too(configs: list[uvicorn.Config]) -> None:
    result = CliRunner().invoke(entry.main, [], env={"UVICORN_WS_PER_MESSAGE_DEFLATE": "false"})
    assert result.exit_code == 0, result.output
    assert configs[0].ws_per_message_deflate is False


@pytest.mark.parametrize("option", ["--reload", "--workers", "--lifespan", "--factory"])
def test_options_that_would_serve_something_else_are_refused(
    option: str, configs: list[uvicorn.Config]
) -> None:
    result = CliRunner().invoke(entry.main, [option, "2"])
    assert result.exit_code == 2
    assert "No such option" in result.output
    assert configs == []


def test_a_server_that_did_not_start_exits_as_uvicorn_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record(monkeypatch, starts=False)
    assert CliRunner().invoke(entry.main, []).exit_code == 3
