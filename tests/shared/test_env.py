from __future__ import annotations

import re
from typing import Any

import pytest

from shared.env import (
    Choice,
    Devices,
    Flag,
    Integer,
    Kind,
    Level,
    Number,
    OrNone,
    Setting,
    Text,
    Words,
    render_table,
)

SPELLINGS = {"1": True, "true": True, "yes": True, "on": True}
SPELLINGS |= {"0": False, "false": False, "no": False, "off": False}


@pytest.mark.parametrize("raw", [*SPELLINGS, *(s.upper() for s in SPELLINGS), " On ", "fAlSe"])
def test_a_flag_takes_eight_spellings_in_any_case(raw: str) -> None:
    flag = Setting("ASR_X", Flag(), False, "x")
    assert flag.read({"ASR_X": raw}) is SPELLINGS[raw.strip().lower()]


@pytest.mark.parametrize("raw", ["", "2", "enabled", "disable", "y", "n", "t", "none", "o n"])
def test_a_flag_refuses_anything_else_naming_the_variable(raw: str) -> None:
    flag = Setting("ASR_X", Flag(), True, "x")
    with pytest.raises(ValueError, match=r"^ASR_X must be 1 or 0 \(true/false"):
        flag.read({"ASR_X": raw})


BAD: list[tuple[Kind[Any], str]] = [
    (Integer(1), "0"),
    (Integer(1), "x"),
    (Integer(1), "1.5"),
    (Integer(1), ""),
    (Integer(0), "-1"),
    (Integer(2, even=True), "33"),
    (Number("seconds", zero=False), "0"),
    (Number("seconds", zero=False), "nan"),
    (Number("seconds", zero=True), "-0.5"),
    (Number("seconds", zero=True), "inf"),
    (Number("milliseconds", zero=True, scale=0.001), "soon"),
    (Level(), "0"),
    (Level(), "-inf"),
    (Choice(("shm", "queue")), "pipe"),
    (Choice(("shm", "queue")), "SHM"),
    (Devices(), "tpu"),
    (Devices(), "cpu,gpu"),
    (Devices(), " , "),
    (Devices(), ""),
    (Text("a model"), ""),
    (OrNone(Integer(1)), "0"),
    (OrNone(Devices()), "tpu"),
]


@pytest.mark.parametrize(("kind", "raw"), BAD)
def test_each_kind_refuses_bad_values_naming_the_variable(kind: Kind[Any], raw: str) -> None:
    setting = Setting("ASR_X", kind, None, "x")
    with pytest.raises(
        ValueError, match=f"^ASR_X must be {re.escape(kind.values)}, not {re.escape(repr(raw))}$"
    ):
        setting.read({"ASR_X": raw})


GOOD: list[tuple[Kind[Any], str, object]] = [
    (Integer(1), " 7 ", 7),
    (Integer(0), "0", 0),
    (Integer(2, even=True), "32", 32),
    (Number("seconds", zero=False), "2.5", 2.5),
    (Number("seconds", zero=True), "0", 0.0),
    (Number("milliseconds", zero=False, scale=0.001), "250", 0.25),
    (Level(), "-30", -30.0),
    (Choice(("shm", "queue")), "queue", "queue"),
    (Devices(), "cpu, cuda:1", ("cpu", "cuda:1")),
    (Words(), " a, ,b ,a", frozenset({"a", "b"})),
    (Words(), "", frozenset()),
    (Text("a model"), " checksum ", "checksum"),
    (OrNone(Integer(1)), "3", 3),
    (OrNone(Integer(1)), "", None),
    (OrNone(Flag()), " ", None),
]


@pytest.mark.parametrize(("kind", "raw", "value"), GOOD)
def test_each_kind_parses_good_values(kind: Kind[Any], raw: str, value: object) -> None:
    assert Setting("ASR_X", kind, None, "x").read({"ASR_X": raw}) == value


def test_unset_is_the_default() -> None:
    assert Setting("ASR_X", Integer(1), 5, "x").read({"ASR_Y": "0"}) == 5


def test_defaults_are_shown_as_written() -> None:
    assert Setting("ASR_X", Number("ms", zero=False, scale=0.001), 0.6, "x").default_text == "`600`"
    assert Setting("ASR_X", Flag(), True, "x").default_text == "`1`"
    assert Setting("ASR_X", Words(), frozenset(), "x").default_text == "(none)"
    assert Setting("ASR_X", OrNone(Integer(1)), None, "x", shown="`ASR_Y`").default_text == (
        "`ASR_Y`"
    )


def test_the_table_escapes_pipes() -> None:
    table = render_table([Setting("ASR_X", Text("a model"), "a", "`tiny|large`")])
    assert table.splitlines()[2] == "| `ASR_X` | `a` | a model | `tiny\\|large` |"
