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


def test_no_installed_dependency_pulls_in_a_build_of_its_own() -> None:
    """What `pip install -e '.[gpu,dev]'` installs beside onnxruntime-gpu must not bring the
    CPU build back: no installed distribution but ONNX Runtime's and ours requires one."""
    pulling = set()
    for distribution in distributions():
        name = distribution.metadata["Name"].lower()
        if name in BUILDS or name == "asr-gateway":
            continue
        for requirement in distribution.requires or []:
            parsed = Requirement(requirement)
            if parsed.name.lower() in BUILDS and (
                parsed.marker is None or parsed.marker.evaluate({"extra": ""})
            ):
                pulling.add(f"{name} requires {requirement}")
    assert not pulling


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
