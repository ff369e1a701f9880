"""What the gateway serves: the models a session may choose, and the pools behind them.

A served model is a streaming pool with at most one offline companion (the `offline` mode,
2pass sentences and whole files), one VAD companion (2pass sentence ends, and the speech a
speaker model embeds) and one speaker companion (CAM++: who spoke when). Companions are
pools of their own, and two models may name the same one: it is then one pool. Pure data:
``gateway.models.models_file`` reads a table from ``ASR_MODELS``, ``single_model`` makes the
one-model table of ``ASR_MODEL``, ``ASR_OFFLINE_MODEL``, ``ASR_VAD_MODEL`` and
``ASR_SPEAKER_MODEL``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath

from shared.engines import Role
from shared.settings import PoolSettings

# A model's name is a metric label value and a URL parameter: short, and plain.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
# OpenAI's transcription models: a request naming one gets the default model, so that code
# written for OpenAI works with only its base URL changed.
OPENAI_MODELS = frozenset(
    {
        "whisper-1",
        "gpt-4o-transcribe",
        "gpt-4o-mini-transcribe",
        "gpt-4o-mini-transcribe-2025-03-20",
        "gpt-4o-mini-transcribe-2025-12-15",
        "gpt-4o-transcribe-diarize",
        "gpt-transcribe",
    }
)


@dataclass(frozen=True, slots=True)
class PoolEntry:
    """One pool: ``name`` is its entry's (the ``model`` label of its metrics); its role is
    ``settings.kind``."""

    name: str
    settings: PoolSettings


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """A model a session or request may choose by ``name``: its streaming pool and its
    companions by role (``Role.OFFLINE``, ``VAD``, ``SPEAKER``; the punctuation runs inside
    the offline pool). ``max_sessions``: its own cap of live sessions, within the
    gateway-wide one (None: only that one)."""

    name: str
    streaming: PoolEntry
    companions: Mapping[Role, PoolEntry] = field(default_factory=dict)
    max_sessions: int | None = None

    def companion(self, role: Role) -> PoolEntry | None:
        return self.companions.get(role)

    @property
    def pools(self) -> tuple[PoolEntry, ...]:
        return (self.streaming, *self.companions.values())


@dataclass(frozen=True, slots=True)
class ModelTable:
    """The models served, ``default`` first among ``choices``; ``from_file``: whether an
    ``ASR_MODELS`` file made it (else the one model of the ``ASR_*MODEL`` settings)."""

    default: str
    choices: tuple[ModelChoice, ...]
    from_file: bool = False

    def __post_init__(self) -> None:
        names = [choice.name for choice in self.choices]
        if len(set(names)) != len(names):
            raise ValueError(f"model names must be unique: {', '.join(names)}")
        if self.default not in names:
            raise ValueError(f"the default model {self.default!r} is not served")

    def choice(self, name: str) -> ModelChoice | None:
        return next((each for each in self.choices if each.name == name), None)

    @property
    def default_choice(self) -> ModelChoice:
        choice = self.choice(self.default)
        assert choice is not None, "checked at construction"
        return choice

    @property
    def pool_entries(self) -> tuple[PoolEntry, ...]:
        """Every pool once, in the order the models name them (a shared companion once)."""
        return tuple(dict.fromkeys(p for choice in self.choices for p in choice.pools))


def model_id(model: str) -> str:
    """A model setting's value as a model's name: a directory by its last part only, so
    that no server path is shown; a hub id or short name as it is."""
    if model.startswith(("/", ".", "~")):
        return PurePath(model.rstrip("/")).name or model
    return model


def single_model(
    pool: PoolSettings, companions: Mapping[Role, PoolSettings] | None = None
) -> ModelTable:
    """One model of ``pool`` and its companions, named by its model
    (``paraformer-zh-streaming``, ``synthetic:tiny``, a directory's last part), as are its
    companions' pools (their metrics' ``model`` label)."""
    name = model_id(pool.model)
    entries = {
        role: PoolEntry(model_id(settings.model), settings)
        for role, settings in (companions or {}).items()
    }
    return ModelTable(name, (ModelChoice(name, PoolEntry(name, pool), entries),))
