"""ONNX Runtime's two builds stay apart: `onnxruntime` and `onnxruntime-gpu` install the same
package, and whichever is installed last wins, so a GPU install that pulled the CPU build
in (through the base dependencies, another extra, or a dependency's own requirements)
would quietly take the CUDA provider away. The project's extras name one each; every
install command we publish names one."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import distributions
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
BUILDS = {"onnxruntime", "onnxruntime-gpu"}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower() for r in requirements}


def test_each_build_has_an_extra_and_nothing_else_names_either() -> None:
    extras: dict[str, list[str]] = PROJECT["optional-dependencies"]
    assert not _names(PROJECT["dependencies"]) & BUILDS
    assert _names(extras["cpu"]) & BUILDS == {"onnxruntime"}
    assert _names(extras["gpu"]) & BUILDS == {"onnxruntime-gpu"}
    others = {name: _names(reqs) & BUILDS for name, reqs in extras.items()}
    assert {name for name, builds in others.items() if builds} == {"cpu", "gpu"}


def _requirements_closure(names: set[str]) -> dict[str, set[str]]:
    """Every installed distribution that ``names`` need, by name, with what each needs
    (their requirements without extras, as installed here)."""
    installed = {d.metadata["Name"].lower(): d for d in distributions()}
    needs: dict[str, set[str]] = {}
    waiting = list(names)
    while waiting:
        name = waiting.pop()
        if name in needs or name not in installed:
            continue
        needs[name] = set()
        for requirement in installed[name].requires or []:
            parsed = Requirement(requirement)
            if parsed.marker is None or parsed.marker.evaluate({"extra": ""}):
                needs[name].add(parsed.name.lower())
                waiting.append(parsed.name.lower())
    return needs


def test_what_a_gpu_install_brings_never_pulls_in_the_cpu_build() -> None:
    """`pip install -e '.[gpu]'`: the base dependencies, and theirs, as installed here, must
    not require `onnxruntime`, or pip would install the CPU build over the GPU one."""
    closure = _requirements_closure(_names(PROJECT["dependencies"]))
    assert "funasr" in closure  # the closure was found: the project is installed here
    pulling = {name for name, needs in closure.items() if needs & BUILDS}
    assert not pulling


def test_the_test_dependencies_are_for_cpu_machines() -> None:
    """[dev] is installed with [cpu]: Pipecat requires onnxruntime (its Silero VAD), so
    [gpu,dev] would end with the CPU build. docs/workers.md says so; this notices if
    another test dependency starts to, or Pipecat stops."""
    dev = _names(PROJECT["optional-dependencies"]["dev"])
    closure = _requirements_closure(dev)
    pulling = {name for name, needs in closure.items() if needs & BUILDS}
    assert pulling == {"pipecat-ai"}


def _installs(text: str) -> list[str]:
    """The extras of every `pip install ... -e '.[...]'` / `pip install ".[...]"` in text;
    ``""`` for an install of the project with none."""
    return [
        match.group(1) or ""
        for match in re.finditer(
            r"pip install (?:-q )?(?:-e )?['\"]?\.(?:\[([^\]]*)\])?['\"]?", text
        )
    ]


def test_every_published_install_names_one_build() -> None:
    readme = (ROOT / "README.md").read_text()
    installs = {
        "README.md": _installs(readme),
        ".ci/run": _installs((ROOT / ".ci" / "run").read_text()),
        "docs/workers.md": _installs((ROOT / "docs" / "workers.md").read_text()),
    }
    for where, extras in installs.items():
        for extra in extras:
            builds = {name for name in extra.split(",") if name in {"cpu", "gpu"}}
            assert len(builds) == 1, f"{where}: pip install .[{extra}] names {builds or 'none'}"
    # The quick start serves on CPUs and tests with the CPU build; the GPU section, the other.
    assert installs["README.md"][:2] == ["cpu", "cpu,dev"]
    assert "gpu" in installs["README.md"]
    assert installs[".ci/run"] == ["cpu,dev"]


def test_the_image_installs_the_build_its_argument_names() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "ARG ONNXRUNTIME=cpu" in dockerfile
    assert 'pip install ".[${ONNXRUNTIME}]"' in dockerfile
