"""The tree says the architecture: ``gateway/``'s imports point down, in no cycle.

Each folder of ``gateway/`` is one part, and a few modules stand alone at its top (the app,
its settings, its metrics). Below everything, pure audio (``audio``) and the settings;
then FunASR's protocol, sans I/O (``funasr``) and the limits; the session both dialects
use; then what serves over it: the file path, the OpenAI and Deepgram dialects (neither imports
the other), operations; the app on
top. The client imports only the PCM facts of the server's. From ``workers/`` the gateway uses the
pool's interface alone (``workers.pool``). Every import counts, lazy ones too.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.import_graph import first_cycle, graph, imported_names, module_name

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"

# What each part of gateway/ may import, besides itself.
BELOW_SESSION = {"audio", "funasr", "limits", "settings", "metrics", "models", "whole", "speakers"}
MAY_IMPORT: dict[str, set[str]] = {
    "audio": set(),
    "models": set(),
    "settings": {"audio", "models"},
    "metrics": set(),
    "funasr": {"audio", "speakers"},
    "limits": {"audio", "funasr", "settings", "models"},
    "whole": {"audio", "funasr"},
    "speakers": set(),  # the live speaker tracker: numpy only
    "session": BELOW_SESSION,
    "files": BELOW_SESSION | {"session"},
    "openai_api": BELOW_SESSION | {"session", "files"},
    "deepgram": BELOW_SESSION | {"session"},
    # The enrolment command (ops.enrol) decodes clips as a file's reference is decoded.
    "ops": BELOW_SESSION | {"session", "files"},
    "client": {"audio"},
    "pools": BELOW_SESSION | {"session"},
    "app": BELOW_SESSION | {"session", "files", "openai_api", "deepgram", "ops", "pools"},
    "__main__": {"app", "ops"},
}
TOP_LEVEL_MODULES_AT_MOST = 12


def _graph() -> dict[str, set[str]]:
    return graph(["gateway"])


def _part(module: str) -> str | None:
    """The folder or top-level module of gateway/ a module is (None: the package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_is_in_a_part_that_the_rules_name() -> None:
    parts = {_part(name) for name in _graph()} - {None}
    assert parts == set(MAY_IMPORT)


def test_each_part_imports_only_the_parts_below_it() -> None:
    wrong = [
        f"{module} imports {imported}"
        for module, imports in _graph().items()
        for imported in imports
        if (part := _part(module)) is not None
        and (other := _part(imported)) not in (part, None)
        and other not in MAY_IMPORT[part]
    ]
    assert wrong == []


def test_no_module_imports_in_a_cycle() -> None:
    cycle = first_cycle(_graph())
    assert cycle is None, " -> ".join(cycle or [])


def test_the_gateway_uses_the_pools_interface_only() -> None:
    workers = GATEWAY.parent / "workers"
    modules = {module_name(path) for path in workers.rglob("*.py")}
    reached = {
        imported
        for path in GATEWAY.rglob("*.py")
        for imported in imported_names(path)
        if imported in modules
    }
    assert reached <= {"workers", "workers.pool"}, sorted(reached)


def test_few_modules_stay_at_the_top() -> None:
    top = [path.name for path in GATEWAY.glob("*.py")]
    assert len(top) <= TOP_LEVEL_MODULES_AT_MOST, sorted(top)
