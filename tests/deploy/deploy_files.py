"""Reading the deployment files (deploy/): their paths, durations as each tool writes them,
and the settings each gives the gateway."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from gateway.session.closing import CLOSE_GRACE_S
from shared import settings_table as table
from shared.env import Setting

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
UNIT = DEPLOY / "asr-gateway.service"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "docker-compose.yml"
HAPROXY_CFG = DEPLOY / "haproxy.cfg"  # the lead's; read, never required here

FUNASR_PORT = 10095  # what FunASR's clients connect to
# The files this test owns; each must explain itself in comments.
COMMENTED_FILES = [
    UNIT,
    DOCKERFILE,
    COMPOSE,
    ROOT / ".dockerignore",
    *sorted(KUBERNETES.glob("*.yaml")),
]


UNITS_S = {"": 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "ms": 0.001, "h": 3600.0}


def seconds(text: str, bare: str = "s") -> float:
    """A duration as systemd ("60", "1min 30s"), Compose ("1m30s") or HAProxy ("500ms";
    a bare number is milliseconds there: ``bare="ms"``) write it."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip())
    assert parts, f"not a duration: {text!r}"
    total = 0.0
    for number, unit in parts:
        assert unit in UNITS_S, f"unknown unit in {text!r}"
        total += float(number) * UNITS_S[unit or bare]
    return total


def resolved(value: str) -> str:
    """``${VAR:-default}`` / ``${VAR-default}`` (Compose, HAProxy) as its default: what
    the file gives when nobody sets the variable."""
    return re.sub(r"\$\{\w+:?-([^}]*)\}", r"\1", value)


def setting(env: Mapping[str, str], entry: Setting[Any]) -> Any:
    """The value a process with this environment reads, as ``from_env`` parses it."""
    return entry.read({key: resolved(value) for key, value in env.items()})


def stop_budget(env: Mapping[str, str]) -> float:
    """The longest a stop may take with these settings: the drain's delay and timeout, the
    grace for closing the last sessions, the workers' exit."""
    return (
        float(setting(env, table.DRAIN_DELAY))
        + float(setting(env, table.DRAIN_TIMEOUT))
        + CLOSE_GRACE_S
        + float(setting(env, table.WORKER_STOP_TIMEOUT))
    )


def unit_entries() -> dict[str, list[tuple[str, str]]]:
    """The unit file's sections, each a list of (key, value): keys may repeat."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        assert current is not None, f"an entry before any section: {line!r}"
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def unit_value(section: str, key: str) -> str:
    values = [value for name, value in unit_entries()[section] if name == key]
    assert values, f"{key}= missing from [{section}]"
    return values[-1]  # systemd: the last one wins


def unit_environment() -> dict[str, str]:
    env: dict[str, str] = {}
    for name, value in unit_entries()["Service"]:
        if name == "Environment":
            for assignment in value.split():
                key, _, val = assignment.strip('"').partition("=")
                env[key] = val
    return env


def dockerfile_instructions() -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    joined = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or not line:
            continue
        joined += line
        if joined.endswith("\\"):
            joined = joined[:-1] + " "
            continue
        instruction, _, arguments = joined.partition(" ")
        yield instruction.upper(), arguments.strip()
        joined = ""


def dockerfile(instruction: str) -> list[str]:
    return [args for name, args in dockerfile_instructions() if name == instruction]


def dockerfile_cmd() -> list[str]:
    (cmd,) = dockerfile("CMD")
    parsed = json.loads(cmd)  # exec form: the gateway is PID 1 and gets the signal itself
    assert isinstance(parsed, list)
    return [str(word) for word in parsed]


def option(argv: list[str], name: str) -> str:
    assert name in argv, f"{name} missing from {argv}"
    return argv[argv.index(name) + 1]


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def gateway_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = compose()["services"]
    return {name: spec for name, spec in services.items() if name != "haproxy"}


def k8s_documents() -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted(KUBERNETES.glob("*.yaml")):
        documents += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return documents


def k8s(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in k8s_documents() if doc["kind"] == kind]


def gateway_pod() -> dict[str, Any]:
    workloads = k8s("StatefulSet") + k8s("Deployment")
    assert len(workloads) == 1, "one gateway workload"
    pod: dict[str, Any] = workloads[0]["spec"]["template"]["spec"]
    return pod


def gateway_container() -> dict[str, Any]:
    (container,) = gateway_pod()["containers"]
    assert isinstance(container, dict)
    return container


def container_env() -> dict[str, str]:
    return {e["name"]: e["value"] for e in gateway_container()["env"] if "value" in e}


def container_port(port: int | str) -> int:
    """A probe's or a Service's port: a number, or a container port's name."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in gateway_container()["ports"]}
    assert port in named, f"no container port named {port!r}"
    return int(named[port])


def haproxy_default_server() -> list[str]:
    """The words of haproxy.cfg's default-server line, variables at their defaults."""
    for line in HAPROXY_CFG.read_text().splitlines():
        words = line.split()
        if words and words[0] == "default-server":
            return [resolved(word).strip('"') for word in words[1:]]
    return []
