"""The project's import graph, read from the source: what each module imports of the
project's own, wherever its import statements are (lazy ones inside functions too)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> Iterator[str]:
    """Every name an import statement of ``path`` imports; ``from package import module``
    imports that module too."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            assert node.level == 0, f"{path}: relative import"
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def graph(packages: Iterable[str], root: Path = ROOT) -> dict[str, set[str]]:
    """For each module of ``packages``, the modules of ``packages`` it imports."""
    paths = {
        module_name(path, root): path
        for package in packages
        for path in (root / package).rglob("*.py")
    }
    modules = set(paths)
    return {
        name: {imported for imported in imported_names(path) if imported in modules} - {name}
        for name, path in paths.items()
    }


def first_cycle(modules: dict[str, set[str]]) -> list[str] | None:
    """A cycle of imports (its modules, the first one again at the end), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(modules[module]):
            found = visit(imported, [*path, module])
            if found is not None:
                return found
        done.add(module)
        return None

    for module in sorted(modules):
        found = visit(module, [])
        if found is not None:
            return found
    return None
