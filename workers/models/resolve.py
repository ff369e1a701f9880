"""Resolve a model setting's value to a model kind and a local model directory.

``checksum`` needs no model. ``synthetic:tiny`` / ``synthetic:large`` are built once into the
model cache, as the kind of model asked for; ``synthetic-NAME:SIZE`` builds a named build
(``synthetic-seaco:tiny``: a SeACo-Paraformer, an offline model that takes hotwords). A local
directory is used as it is. Anything else is a hub id or one of funasr's short names for
one: looked up in ModelScope's local cache, else downloaded; where the hub is unreachable we
fail within seconds with one line naming the way out, rather than funasr's hub retries and
a traceback. What each kind is, is the table's (``workers.engines.kinds``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from shared.engines import Role
from shared.errors import WorkerLoadError
from workers.engines.kinds import (
    KindRow,
    default_build,
    hub_aliases,
    kind_named,
    kind_of_class,
    kinds_for,
    synthetic_builds,
)
from workers.engines.runtime.model_dir import model_class

HUB_HOST = "www.modelscope.cn"
HUB_PROBE_TIMEOUT_S = 3.0
# The setting that names a model of each role, for messages.
ROLE_SETTINGS = {
    Role.STREAMING: "ASR_MODEL",
    Role.OFFLINE: "ASR_OFFLINE_MODEL",
    Role.VAD: "ASR_VAD_MODEL",
    Role.PUNCTUATION: "ASR_PUNC_MODEL",
    Role.SPEAKER: "ASR_SPEAKER_MODEL",
}
MODEL_FREE = "checksum"  # the one kind named by its name alone
ModelSize = Literal["tiny", "large"]  # the synthetic builds' (workers.models.synthetic.base)


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    kind: KindRow
    model_dir: str | None
    description: str


def resolve_model(model: str, cache_dir: str, role: Role = Role.STREAMING) -> ResolvedModel:
    """Find or build the model; may take minutes for ``synthetic:large`` the first time.

    ``role`` is what is asked for (``ASR_MODEL``'s streaming model, ``ASR_OFFLINE_MODEL``'s
    offline one, ...); a directory holding a kind of model that cannot fill it is refused.
    """
    variable = ROLE_SETTINGS[role]
    if model == MODEL_FREE and role == Role.STREAMING:
        free = kind_named(MODEL_FREE)
        assert free is not None, "the table has the model-free kind"
        return ResolvedModel(free, None, "checksum (model-free)")
    synthetic = _SYNTHETIC.fullmatch(model)
    if synthetic is not None:
        build = synthetic["build"] or default_build(role)
        size = synthetic["size"]
        if build not in synthetic_builds() or size not in ("tiny", "large"):
            others = [name for kind in kinds_for(role) for name in kind.synthetic][1:]
            named = "".join(f", synthetic-{name}:tiny|large" for name in others)
            raise WorkerLoadError(
                f"{variable}={model}: use synthetic:tiny or synthetic:large{named}"
            )
        try:
            path = ensure_synthetic(Path(cache_dir), build, cast(ModelSize, size))
        except WorkerLoadError as exc:
            raise WorkerLoadError(f"{variable}={model}: {exc.message}") from None
        return _from_directory(path, model, role)  # refuses a build of another role
    path = Path(model).expanduser()
    if path.is_dir():
        return _from_directory(path.resolve(), model, role)
    if model.startswith(("/", ".", "~")) or model.count("/") > 1:
        raise WorkerLoadError(f"{variable}={model}: no such directory")
    return _from_directory(_find_or_download(model), model, role)


# A gateway's pools are prepared at once, each resolving its model in a thread of its own.
# A first build or download imports funasr (or modelscope), whose modules import each other:
# two threads importing them at once meet Python's per-module import locks in opposite
# orders, and importlib raises _DeadlockError (funasr.models.bicif_paraformer,
# ct_transformer, fsmn_vad_streaming: every first start of a 2pass server here). So they
# take turns.
_FIRST_IMPORTS = threading.Lock()

_SYNTHETIC = re.compile(r"synthetic(?:-(?P<build>[a-z]+))?:(?P<size>.*)")


def unbuilt_synthetic(model: str, cache_dir: str, role: Role = Role.STREAMING) -> KindRow | None:
    """The kind of the synthetic build ``model`` names, where the cache does not hold it
    yet (``None`` for anything else: a built one, a directory, a hub id, a bad name, which
    :func:`resolve_model` reports)."""
    synthetic = _SYNTHETIC.fullmatch(model)
    if synthetic is None:
        return None
    build = synthetic["build"] or default_build(role)
    size = synthetic["size"]
    if build is None or size not in ("tiny", "large"):
        return None
    if (synthetic_dir(Path(cache_dir), build, size) / "model.pt").is_file():
        return None
    return next((kind for kind in kinds_for(role) if build in kind.synthetic), None)


def synthetic_dir(cache_dir: Path, build: str, size: str, seed: int = 0) -> Path:
    """Where the cache holds a synthetic build."""
    return cache_dir / f"synthetic-{build}-{size}-seed{seed}"


def ensure_synthetic(cache_dir: Path, kind: str, size: ModelSize, seed: int = 0) -> Path:
    """Build the synthetic model into the cache unless it is already there.

    A build that cannot be written (a full disk, a read-only cache) raises
    :class:`WorkerLoadError` naming the directory and the cause, and leaves nothing.
    """
    target = synthetic_dir(cache_dir, kind, size, seed)
    if (target / "model.pt").is_file():
        return target
    try:
        with _FIRST_IMPORTS:
            if not (target / "model.pt").is_file():  # another thread's turn built it
                _build(target, kind, size, seed)
    except Exception as exc:
        cause = _os_error_in(exc)
        if cause is None:
            raise  # not the disk's: a bug of the build, with its traceback
        raise WorkerLoadError(f"cannot build {target}: {cause}{_free_in(cache_dir)}") from None
    return target


def _build(target: Path, kind: str, size: ModelSize, seed: int) -> None:
    from workers.models.synthetic import build_synthetic

    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: a concurrent, interrupted or failed build never
    # leaves a half-written directory where a worker would load it.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build_synthetic(kind, staging, size, seed)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "model.pt").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _os_error_in(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc``: itself, or one it was raised from or while handling
    (torch's "unexpected pos" error has the ENOSPC of the write it was in as its context)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _free_in(directory: Path) -> str:
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return ""
    return f" ({free / (1 << 20):.3g} MiB free there)"


def _from_directory(path: Path, name: str, role: Role = Role.STREAMING) -> ResolvedModel:
    variable = ROLE_SETTINGS[role]
    if not (path / "config.yaml").is_file():
        raise WorkerLoadError(f"{variable}={name}: {path} has no config.yaml")
    found = model_class(path)
    kind = kind_of_class(found)
    if kind is None or not kind.serves(role):
        fits = kinds_for(role)
        what = " or ".join(kind.description for kind in fits if kind.classes)
        supported = ", ".join(c for kind in fits for c in kind.classes)
        raise WorkerLoadError(
            f"{variable}={name}: model class {found!r} is not {what} (supported: {supported})"
        )
    return ResolvedModel(kind, str(path), f"{name} ({found})")


def _hub_cache_candidates(model_id: str) -> list[Path]:
    root = Path(os.environ.get("MODELSCOPE_CACHE", Path.home() / ".cache" / "modelscope"))
    return [root / "hub" / "models" / model_id, root / "hub" / model_id, root / model_id]


def _find_or_download(name: str) -> Path:
    model_id = hub_aliases().get(name, name)
    for candidate in _hub_cache_candidates(model_id):
        if (candidate / "config.yaml").is_file():
            return candidate
    way_out = "set ASR_MODEL=synthetic:large (random weights) or ASR_MODEL=/path/to/model_dir"
    if not _hub_reachable():
        raise WorkerLoadError(
            f"model {name!r} is not in the local cache and the model hub is unreachable: {way_out}"
        )
    try:
        with _FIRST_IMPORTS:
            from modelscope.hub.snapshot_download import snapshot_download

            return Path(snapshot_download(model_id))
    except Exception as exc:
        raise WorkerLoadError(f"could not download model {name!r} ({exc}): {way_out}") from None


def _hub_reachable() -> bool:
    try:
        with socket.create_connection((HUB_HOST, 443), timeout=HUB_PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False
