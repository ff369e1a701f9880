"""What the GPU machine must be given, worked out from the requirements, not listed by hand.

The machine has CPython 3.12 with CUDA torch, onnxruntime, numpy, scipy, numba, transformers
and more (``MACHINE_HAS``), but no funasr, starlette or uvicorn, and no network. What we
carry is the closure of our requirements (pyproject's dependencies, and the test runner the
CUDA tests need) for CPython 3.12 on x86-64 Linux, each at the version installed here, less
what the machine has and less ``NOT_IMPORTED``: funasr's requirements that no code path of
the check imports (jieba alone is a 19 MB wheel; with them the wheels would not fit the
64 MiB a device call carries).

That the list is right is proved twice, there: every carried wheel's requirements are
installed at versions that satisfy them, and every module in ``IMPORTS`` imports
(``bench.device.imports``). ``import funasr`` alone proves nothing: funasr's ``__init__``
swallows each of its submodules' import errors, so the modules we use are named one by one.
"""

from __future__ import annotations

import tomllib
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.parser import HeaderParser
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.common import ROOT

# The markers' values on the GPU machine: CPython 3.12 on x86-64 Linux.
TARGET_ENVIRONMENT = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
}
# pyproject's addopts (-n 2 --dist loadfile) and its `timeout` ini option are errors without
# these (--strict-config); the image has a pytest too, but its plugins are not ours to load.
TEST_RUNNER = ("pytest", "pytest-xdist", "pytest-timeout")
# The image's packages that our requirements reach (KINDS.md's list, read 2026-11-17): not
# carried, and each checked there against what our wheels require of it. onnx, pytest and
# pytest's plugins are in the image too, but carried: the export, the provider probe and
# the test run depend on their versions.
MACHINE_HAS = frozenset(
    canonicalize_name(name)
    for name in (
        *("torch", "numpy", "onnxruntime", "onnxruntime-gpu", "scipy", "numba", "llvmlite"),
        *("scikit-learn", "joblib", "threadpoolctl", "transformers", "tokenizers"),
        *("huggingface-hub", "safetensors", "sentencepiece", "tiktoken", "regex"),
        *("requests", "urllib3", "certifi", "idna", "charset-normalizer", "tqdm", "pyyaml"),
        *("protobuf", "ml-dtypes", "typing-extensions", "packaging", "setuptools", "six"),
        *("filelock", "fsspec", "msgpack", "lazy-loader", "anyio", "httpx", "httpcore"),
        *("h11", "click", "prometheus-client", "uvloop", "pygments"),
    )
)
# Required by funasr (or pyproject) but imported by no code path the check runs: left out,
# found by running the steps' code with each one's import refused. The import check there
# proves it again: these are absent, and IMPORTS still import.
NOT_IMPORTED: dict[str, str] = {
    "jieba": "funasr's, for Chinese word segmentation in training recipes (a 19 MB wheel)",
    "modelscope": "funasr's hub downloads; the check builds its model",
    "oss2": "funasr's, object storage",
    "umap-learn": "funasr's, speaker clustering",
    "tensorboardx": "funasr's, training logs",
    "jamo": "funasr's, Korean text",
    "jaconv": "funasr's, Japanese text",
    "hydra-core": "funasr's, training configs",
    "wetext": "ITN of offline results (workers.engines.itn); the check serves no offline model",
}
# What must import there, each at the depth we use it: the third-party modules, then ours,
# whose heavy imports are lazy (each step's entry module, and what its workers load).
IMPORTS: tuple[str, ...] = (
    "funasr.auto.auto_model",  # the PyTorch engine's AutoModel
    "funasr.models.paraformer_streaming.model",  # the synthetic model's build
    "funasr.models.fsmn_vad_streaming.model",
    "funasr.frontends.wav_frontend",
    "funasr.utils.postprocess_utils",  # the ONNX engine loads this file by its path
    *("kaldi_native_fbank", "onnx", "onnxruntime", "torch", "numpy"),
    *("starlette", "uvicorn", "anyio", "websockets", "python_multipart", "soundfile", "soxr"),
    *("yaml", "prometheus_client", "httpx", "uvloop"),
    *("pytest", "xdist", "pytest_timeout"),
    "gateway.app",
    "workers.engines.paraformer.streaming_onnx",
    "workers.engines.paraformer.streaming",
    "workers.models.synthetic",
    "workers.models.export.paraformer",
    "bench.load.ws_load",
    "bench.models.raw_ceiling",
)


def normalize(name: str) -> str:
    return canonicalize_name(name)


@dataclass(frozen=True, slots=True)
class Distribution:
    name: str  # normalized
    version: str
    requires: tuple[str, ...]


Lookup = Callable[[str], Distribution | None]


def roots(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """pyproject's dependencies (whatever the product needs now), and the test runner."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return [Requirement(r) for r in (*project["dependencies"], *TEST_RUNNER)]


def installed(name: str) -> Distribution | None:
    """The distribution installed here, where the versions we carry come from."""
    try:
        found = distribution(name)
    except PackageNotFoundError:
        return None
    requires = tuple(found.requires or ())
    return Distribution(normalize(found.metadata["Name"]), found.version, requires)


def in_wheels(paths: Iterable[Path]) -> Lookup:
    """A lookup of the wheels themselves: their names, versions and requirements as each
    wheel's METADATA says (what pip there will read)."""
    found: dict[str, Distribution] = {}
    for path in paths:
        with zipfile.ZipFile(path) as wheel:
            name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            metadata = HeaderParser().parsestr(wheel.read(name).decode())
        requires = tuple(metadata.get_all("Requires-Dist") or ())
        dist = Distribution(normalize(metadata["Name"]), metadata["Version"], requires)
        found[dist.name] = dist
    return found.get


@dataclass(slots=True)
class Closure:
    carried: dict[str, str] = field(default_factory=dict)  # name -> version
    provided: set[str] = field(default_factory=set)  # the machine's, reached
    left_out: set[str] = field(default_factory=set)  # NOT_IMPORTED, reached
    unresolved: list[str] = field(default_factory=list)  # "name (required by ...)"


def closure(
    requirements: Iterable[Requirement],
    lookup: Lookup,
    environment: dict[str, str] | None = None,
) -> Closure:
    """Every distribution ``requirements`` reach, through each one's own requirements (its
    extras' too where asked), for ``environment``'s markers (the GPU machine's by default);
    the machine's and NOT_IMPORTED are not followed further. ``unresolved``: reached but
    not found by ``lookup``, with what required them."""
    markers = TARGET_ENVIRONMENT if environment is None else environment
    found = Closure()
    todo = [(requirement, "pyproject") for requirement in requirements]
    extras_seen: dict[str, set[str]] = {}
    while todo:
        requirement, parent = todo.pop()
        name = normalize(requirement.name)
        if name in MACHINE_HAS:
            found.provided.add(name)
            continue
        if name in NOT_IMPORTED:
            found.left_out.add(name)
            continue
        extras = set(requirement.extras)
        if name in extras_seen and extras <= extras_seen[name]:
            continue
        extras_seen.setdefault(name, set()).update(extras)
        dist = lookup(name)
        if dist is None:
            found.unresolved.append(f"{name} (required by {parent})")
            continue
        found.carried[name] = dist.version
        for line in dist.requires:
            needed = Requirement(line)
            active = needed.marker is None or any(
                needed.marker.evaluate({**markers, "extra": extra}) for extra in ("", *extras)
            )
            if active:
                todo.append((needed, name))
    return found
