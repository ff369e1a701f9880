"""A setting's rule is declared once, as its table entry's kind: its variable is read
through it (tests/gateway/test_settings.py), and a settings dataclass built in Python is
held to the same rule, its error naming the field."""

from __future__ import annotations

import math
import re
from dataclasses import fields
from typing import Any

import pytest

from gateway.settings import AccessSettings, GatewaySettings, TranscribeSettings
from shared.env import Choice, Integer, Kind, Number, OrNone, RuntimeName, Text
from shared.settings import ENTRY, PoolSettings
from shared.settings_table import Matching

CLASSES: tuple[type[Any], ...] = (PoolSettings, GatewaySettings, AccessSettings, TranscribeSettings)
FIELDS = [
    (cls, each.name, each.metadata[ENTRY])
    for cls in CLASSES
    for each in fields(cls)
    if ENTRY in each.metadata
]


def _bad(kind: Kind[Any]) -> list[object]:
    """Values of a field's type that ``kind`` refuses."""
    if isinstance(kind, OrNone):
        return _bad(kind.kind)
    if isinstance(kind, Integer):
        too_big = [] if kind.most is None else [kind.most + 1]
        return [kind.least - 1, *too_big, *([kind.least + 1] if kind.even else [])]
    if isinstance(kind, Number):
        return [-1.0, math.nan, math.inf, *([] if kind.zero else [0.0])]
    if isinstance(kind, RuntimeName):  # the variable takes an old name; a field does not
        return ["tensorflow", "paraformer-onnx"]
    if isinstance(kind, Choice):
        return ["maybe"]
    if isinstance(kind, Matching):
        return ["", "a.b"]
    if isinstance(kind, Text):
        return [""]
    return []  # flags and lists: their type says it


BAD = [
    pytest.param(cls, name, bad, id=f"{cls.__name__}.{name}={bad!r}")
    for cls, name, entry in FIELDS
    for bad in _bad(entry.kind)
]


def test_every_settings_class_names_its_entries() -> None:
    assert {cls for cls, _, _ in FIELDS} == set(CLASSES)
    assert len(BAD) > 50


@pytest.mark.parametrize(("cls", "name", "bad"), BAD)
def test_a_field_built_in_python_is_held_to_its_variables_rule(
    cls: type[Any], name: str, bad: object
) -> None:
    with pytest.raises(ValueError, match=f"^{name} must be .*, not {re.escape(repr(bad))}$"):
        cls(**{name: bad})


@pytest.mark.parametrize(
    ("cls", "given", "message"),
    [
        (PoolSettings, {"workers_per_device": 0}, "workers_per_device must be at least 1, not 0"),
        (PoolSettings, {"slot_bytes": 33}, "slot_bytes must be even and at least 2, not 33"),
        (PoolSettings, {"worker_nice": 20}, "worker_nice must be from 0 to 19, not 20"),
        (PoolSettings, {"transport": "pipe"}, "transport must be shm or queue, not 'pipe'"),
        (
            PoolSettings,
            {"onnx_precision": "fp16"},
            "onnx_precision must be fp32 or int8, not 'fp16'",
        ),
        (PoolSettings, {"batch_hold": "soon"}, "batch_hold must be due or wait, not 'soon'"),
        (
            PoolSettings,
            {"batch_wait_s": -0.5},
            "batch_wait_s must be finite and at least 0, not -0.5",
        ),
        (
            GatewaySettings,
            {"idle_timeout_s": math.inf},
            "idle_timeout_s must be finite and positive",
        ),
        (GatewaySettings, {"admission_queue": 0}, "admission_queue must be None or at least 1"),
        (GatewaySettings, {"replica_id": "a.b"}, "replica_id must be letters, digits"),
        (
            AccessSettings,
            {"max_sessions_per_client": -1},
            "max_sessions_per_client must be at least 0",
        ),
    ],
)
def test_the_error_says_the_rule_in_words(
    cls: type[Any], given: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        cls(**given)


def test_the_edges_of_a_rule_are_taken() -> None:
    pool = PoolSettings(worker_nice=19, slot_bytes=2, batch_wait_s=0.0, chunk_deadline_s=0.0003)
    assert (pool.worker_nice, pool.chunk_deadline_s) == (19, 0.0003)
    gateway = GatewaySettings(agent_port=65535, admission_queue=None, drain_delay_s=0.0)
    assert gateway.agent_port == 65535
    assert GatewaySettings(replica_id="gw_2-b").replica_id == "gw_2-b"


def test_a_computed_default_is_no_value_to_build_with() -> None:
    with pytest.raises(ValueError, match=r"^replica_id must be"):
        GatewaySettings(replica_id=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_buffered_s must be"):
        GatewaySettings(max_buffered_s=None)  # type: ignore[arg-type]
