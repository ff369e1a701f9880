"""The tree says the architecture: ``workers/``'s imports point down, in no cycle.

The parent side (``pool/``) and the child side (``worker/``) never import each other: the
pool names the worker's entry point (``workers.ipc.launch``). Both use the wire between
them (``ipc/``) and the engines' registry; model tooling (``models/``) uses the engines;
the engines and the wire use nothing else of ``workers/``. Every import counts, the lazy
ones inside functions too.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.import_graph import first_cycle, graph

WORKERS = Path(__file__).resolve().parents[2] / "workers"
# What each folder of workers/ may import, besides itself.
MAY_IMPORT = {
    "pool": {"ipc", "engines", "models"},
    "worker": {"ipc", "engines"},
    "models": {"engines"},
    "engines": set(),
    "ipc": set(),
}


def _graph() -> dict[str, set[str]]:
    return graph(["workers"])


def _folder(module: str) -> str | None:
    """The folder of workers/ a module is in (``None`` for the package itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_of_workers_is_in_a_folder_of_its_side() -> None:
    loose = [name for name in _graph() if name != "workers" and _folder(name) not in MAY_IMPORT]
    assert loose == []
    assert {path.name for path in WORKERS.iterdir() if path.is_dir()} - {"__pycache__"} == set(
        MAY_IMPORT
    )


def test_no_module_of_workers_imports_in_a_cycle() -> None:
    cycle = first_cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_imports_point_down_and_the_two_sides_never_meet() -> None:
    wrong = sorted(
        f"{module} imports {imported}"
        for module, imported_modules in _graph().items()
        for imported in imported_modules
        if (here := _folder(module)) in MAY_IMPORT
        and (there := _folder(imported)) not in (here, None)
        and there not in MAY_IMPORT[here]
    )
    assert wrong == []
    assert "worker" not in MAY_IMPORT["pool"]
    assert "pool" not in MAY_IMPORT["worker"]
