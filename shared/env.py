"""Settings read from environment variables: one ``Setting`` per variable, one parser per type.

A ``Setting`` is a variable's name, its ``Kind`` (how a value is parsed and checked), its
default and one line of doc. ``shared.settings_table`` lists every setting; the ``from_env``
functions read through it, and docs/settings.md's table is rendered from it (``render_table``).

Unset: the default. Set, a value is stripped and parsed by its kind; empty is "unset" only
where the default is none or computed (``OrNone``), and refused elsewhere. A value its kind
refuses raises ``ValueError`` naming the variable and what it takes, so that start-up fails
in one line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from shared.engines import RUNTIME_ALIASES, RUNTIMES, Runtime

T = TypeVar("T")
C = TypeVar("C", bound=str)


class Kind(Generic[T]):
    """A type of value. ``values`` says what a valid one is, in the error and the settings page."""

    values: str = "text"

    def parse(self, raw: str) -> T:
        """``raw`` (stripped) as a value; ``ValueError`` if it is not one."""
        raise NotImplementedError

    def show(self, value: T) -> str:
        """``value`` as the settings page's default column writes it (Markdown)."""
        return f"`{value}`"


class Text(Kind[str]):
    def __init__(self, values: str) -> None:
        self.values = values

    def parse(self, raw: str) -> str:
        if not raw:
            raise ValueError(raw)
        return raw


class Integer(Kind[int]):
    def __init__(self, least: int, *, even: bool = False, most: int | None = None) -> None:
        self.least = least
        self.most = most
        self.even = even
        if most is None:
            self.values = f"an {'even ' if even else ''}integer ≥ {least}"
        else:
            self.values = f"an {'even ' if even else ''}integer from {least} to {most}"

    def parse(self, raw: str) -> int:
        value = int(raw)
        too_big = self.most is not None and value > self.most
        if value < self.least or too_big or (self.even and value % 2):
            raise ValueError(raw)
        return value


class Number(Kind[float]):
    """A finite number of ``unit`` (more than zero, or zero or more), times ``scale``:
    milliseconds are read into seconds."""

    def __init__(self, unit: str, *, zero: bool, scale: float = 1.0) -> None:
        self.zero = zero
        self.scale = scale
        self.values = f"{unit} {'≥' if zero else '>'} 0"

    def parse(self, raw: str) -> float:
        value = float(raw)
        if not (math.isfinite(value) and (value >= 0 if self.zero else value > 0)):
            raise ValueError(raw)
        return value * self.scale

    def show(self, value: float) -> str:
        return f"`{value / self.scale:g}`"


class Level(Kind[float]):
    values = "dBFS < 0"

    def parse(self, raw: str) -> float:
        value = float(raw)
        if not (math.isfinite(value) and value < 0):
            raise ValueError(raw)
        return value

    def show(self, value: float) -> str:
        return f"`{value:g}`"


class Choice(Kind[C]):
    def __init__(self, choices: tuple[C, ...]) -> None:
        self.choices = choices
        self.values = " or ".join(choices)

    def parse(self, raw: str) -> C:
        for choice in self.choices:
            if raw == choice:
                return choice
        raise ValueError(raw)


class Flag(Kind[bool]):
    """Strict: one of eight spellings, in any case; anything else is an error, so that a
    typo never silently means the opposite."""

    values = "1 or 0 (true/false, yes/no, on/off, any case)"
    ON = frozenset({"1", "true", "yes", "on"})
    OFF = frozenset({"0", "false", "no", "off"})

    def parse(self, raw: str) -> bool:
        word = raw.lower()
        if word in self.ON:
            return True
        if word in self.OFF:
            return False
        raise ValueError(raw)

    def show(self, value: bool) -> str:
        return "`1`" if value else "`0`"


class Words(Kind[frozenset[str]]):
    """A comma-separated list; blanks around and between items are dropped."""

    values = "a comma-separated list"

    def parse(self, raw: str) -> frozenset[str]:
        return frozenset(item.strip() for item in raw.split(",") if item.strip())

    def show(self, value: frozenset[str]) -> str:
        return f"`{','.join(sorted(value))}`" if value else "(none)"


class Devices(Kind[tuple[str, ...]]):
    values = "comma-separated devices: cpu, cuda:N"

    def parse(self, raw: str) -> tuple[str, ...]:
        """The devices, ``cuda`` spelt ``cuda:0`` (as every report then names it)."""
        devices = tuple(d.strip() for d in raw.split(",") if d.strip())
        if not devices or not all(re.fullmatch(r"cpu|cuda(:\d+)?", d) for d in devices):
            raise ValueError(raw)
        return tuple("cuda:0" if d == "cuda" else d for d in devices)

    def show(self, value: tuple[str, ...]) -> str:
        return f"`{','.join(value)}`"


class RuntimeName(Kind[Runtime]):
    """A runtime (``shared.engines.RUNTIMES``), or the engine name that meant it before
    the setting was named for what it is (``paraformer-onnx``: ``onnx``)."""

    values = "`torch`, `onnx` or `openvino`"

    def parse(self, raw: str) -> Runtime:
        for runtime in RUNTIMES:
            if raw == runtime:
                return runtime
        if raw in RUNTIME_ALIASES:
            return RUNTIME_ALIASES[raw]
        raise ValueError(raw)


class EngineOrRuntime(Kind[str]):
    """``ASR_ENGINE`` and a models file's ``engine``: a user's engine class by import path
    (``package.module:Class``), or, as before ``ASR_RUNTIME``, a runtime by its old name."""

    values = "`package.module:Class` (a runtime's old name: `paraformer-onnx`, ...)"

    def parse(self, raw: str) -> str:
        if raw in RUNTIME_ALIASES or raw in RUNTIMES:
            return raw
        module, colon, attribute = raw.partition(":")
        parts = [*module.split("."), *attribute.split(".")]
        if colon and all(part.isidentifier() for part in parts):
            return raw
        raise ValueError(raw)


class OrNone(Kind[T | None]):
    """``kind``, or None when unset or empty: what None means (often a default computed
    from another setting) is the setting's ``shown`` text."""

    def __init__(self, kind: Kind[T]) -> None:
        self.kind = kind
        self.values = kind.values

    def parse(self, raw: str) -> T | None:
        return self.kind.parse(raw) if raw else None

    def show(self, value: T | None) -> str:
        return "(none)" if value is None else self.kind.show(value)


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One environment variable: ``read`` it from an environment, or its ``default``."""

    name: str
    kind: Kind[T]
    default: T
    doc: str  # Markdown, as the settings page's "meaning" column shows it
    # The default as the settings page writes it, where it is computed (from another setting, the
    # machine) rather than a value: "`ASR_MAX_SESSIONS`".
    shown: str | None = None

    def read(self, env: Mapping[str, str]) -> T:
        raw = env.get(self.name)
        if raw is None:
            return self.default
        try:
            return self.kind.parse(raw.strip())
        except ValueError:
            raise ValueError(f"{self.name} must be {self.kind.values}, not {raw!r}") from None

    @property
    def default_text(self) -> str:
        return self.kind.show(self.default) if self.shown is None else self.shown


def render_table(settings: Iterable[Setting[Any]], per_model: Iterable[Setting[Any]] = ()) -> str:
    """The settings table, in Markdown: a row per setting. A setting of ``per_model`` says
    so in its meaning: a models file's entry may set it, by its key."""
    lines = ["| variable | default | values | meaning |", "|---|---|---|---|"]
    model_keys = {setting.name for setting in per_model}
    for setting in settings:
        doc = setting.doc
        if setting.name in model_keys:
            doc += f". Per model: `{setting.name[4:].lower()}` in `ASR_MODELS`"
        cells = (f"`{setting.name}`", setting.default_text, setting.kind.values, doc)
        # A | inside a cell, even inside code, would end the cell.
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
