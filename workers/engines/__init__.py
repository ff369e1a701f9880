"""Engines: what a worker runs on the audio, by name.

The names are the rows of ``workers.engines.kinds.ENGINES``, or a user's engine class named
by import path (``package.module:Class``, as uvicorn names an app): both load the same way,
in the worker, through the class's ``load(spec)``. Everything else reads what an engine
does from its ``capabilities``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from shared.engines import EngineName, Role, Runtime
from shared.messages import EngineSpec
from workers.engines.base import Engine
from workers.engines.kinds import ENGINES, KindRow

# Builds the engine a worker runs, in the worker process: :func:`load_engine`, unless the pool
# is given another (a module-level function: it is pickled by name into spawned workers).
EngineLoader = Callable[[EngineSpec], Engine]


class EngineImportError(ValueError):
    """An engine's import path that names no engine class: the message says which part."""


def is_import_path(name: str) -> bool:
    """Whether an engine name is a class's import path (a user's engine) rather than ours."""
    return ":" in name


def engine_class(name: EngineName) -> type[Engine]:
    """The class an engine name (ours, or ``module:Class``) names; :class:`EngineImportError`
    in one line when it names none, or a class that does not fit the engine interface."""
    entry = name if is_import_path(name) else _entry_of(name)
    module_name, _, attribute = entry.partition(":")
    if not module_name or not attribute:
        raise EngineImportError(f"engine {name!r}: write it as 'package.module:Class'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineImportError(f"engine {name!r}: cannot import {module_name!r} ({exc})") from None
    found: object = module
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise EngineImportError(f"engine {name!r}: module {module_name!r} has no {attribute!r}")
    missing = [
        member
        for member in ("load", "open_stream", "feed", "close_stream", "expire_idle")
        if not callable(getattr(found, member, None))
    ]
    if not isinstance(found, type) or missing:
        what = "is not a class" if not isinstance(found, type) else f"has no {', '.join(missing)}"
        raise EngineImportError(
            f"engine {name!r}: {attribute} {what} (the engine interface: docs/adding-a-model.md)"
        )
    return found


def _entry_of(name: EngineName) -> str:
    row = ENGINES.get(name)
    if row is None:
        known = ", ".join(ENGINES)
        raise EngineImportError(f"unknown engine {name!r}; known: {known}, or 'module:Class'")
    return row.entry


def load_engine(spec: EngineSpec) -> Engine:
    """Build the engine ``spec`` names; loads its model (slow for real models)."""
    engine: Engine = engine_class(spec.engine).load(spec)  # type: ignore[attr-defined]
    return engine


def select_engine(kind: KindRow, runtime: Runtime, role: Role | None = None) -> EngineName:
    """The engine that serves a model of ``kind`` under ``runtime`` (``ASR_RUNTIME``), in
    ``role`` (a kind may serve two: SenseVoice streams too): its own for that runtime, else
    the next in the runtime's line (``RUNTIME_FALLBACKS``)."""
    engine = kind.engine(runtime, role)
    if engine is None:
        raise ValueError(f"a {kind.name} model is served inside another's engine, not alone")
    return engine


def needs_onnx_export(engine: EngineName) -> bool:
    """Whether the engine loads an ONNX export of the model (``workers.models.export``)."""
    row = ENGINES.get(engine)
    return row is not None and row.exported
