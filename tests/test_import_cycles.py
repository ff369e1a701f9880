"""No module of the project imports in a cycle: the product, the benchmarks and the tests,
across their packages (each side's own rules: tests/gateway/test_imports.py,
tests/workers/test_imports.py)."""

from __future__ import annotations

from tests.helpers.import_graph import first_cycle, graph

PACKAGES = ("shared", "gateway", "workers", "bench", "tests")


def test_no_module_imports_in_a_cycle() -> None:
    cycle = first_cycle(graph(PACKAGES))
    assert cycle is None, " -> ".join(cycle or [])


def test_a_cycle_is_found_where_there_is_one() -> None:
    modules = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert first_cycle(modules) == ["a", "b", "c", "a"]
    assert first_cycle({"a": {"b"}, "b": set()}) is None
