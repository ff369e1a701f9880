"""Resolve an ``ASR_MODEL`` value to an engine and a local model directory.

``checksum`` needs no model. ``synthetic:tiny`` / ``synthetic:large`` are built once into the
model cache, as the kind of model asked for; ``synthetic-KIND:SIZE`` builds another kind of
``workers.models.synthetic`` (``synthetic-seaco:tiny``: a SeACo-Paraformer, an offline model that
takes hotwords). A local directory is used as it is. Anything else is a hub id: looked up in
ModelScope's local cache, else downloaded; where the hub is unreachable we fail within
seconds with one line naming the way out, rather than funasr's hub retries and a traceback.
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
from typing import Literal

from shared.engines import EngineName
from shared.errors import WorkerLoadError
from workers.engines.model_dir import model_class

HUB_HOST = "www.modelscope.cn"
HUB_PROBE_TIMEOUT_S = 3.0
STREAMING_MODEL_CLASSES = ("ParaformerStreaming",)
# BiCifParaformer gives timestamps; SeacoParaformer timestamps too, and takes hotwords
# (workers.engines.model_dir).
OFFLINE_MODEL_CLASSES = ("Paraformer", "BiCifParaformer", "SeacoParaformer", "SenseVoiceSmall")
# The classes an engine of their own serves, rather than their kind's.
CLASS_ENGINES = {"SenseVoiceSmall": EngineName.SENSEVOICE}
VAD_MODEL_CLASSES = ("FsmnVADStreaming",)
PUNC_MODEL_CLASSES = ("CTTransformer",)
SPEAKER_MODEL_CLASSES = ("CAMPPlus",)
ModelKind = Literal["streaming", "offline", "vad", "punc", "speaker"]


@dataclass(frozen=True, slots=True)
class _Kind:
    variable: str  # the setting that names such a model
    classes: tuple[str, ...]  # the config.yaml `model:` values accepted
    engine: EngineName  # the engine serving it (punctuation: the offline engine, inside it)
    what: str  # for messages: "is not {what}"


KINDS: dict[ModelKind, _Kind] = {
    "streaming": _Kind(
        "ASR_MODEL", STREAMING_MODEL_CLASSES, EngineName.PARAFORMER, "a streaming Paraformer"
    ),
    "offline": _Kind(
        "ASR_OFFLINE_MODEL",
        OFFLINE_MODEL_CLASSES,
        EngineName.PARAFORMER_OFFLINE,
        "an offline Paraformer or SenseVoiceSmall",
    ),
    "vad": _Kind("ASR_VAD_MODEL", VAD_MODEL_CLASSES, EngineName.FSMN_VAD, "an FSMN-VAD"),
    "punc": _Kind(
        "ASR_PUNC_MODEL",
        PUNC_MODEL_CLASSES,
        EngineName.PARAFORMER_OFFLINE,
        "a CT-Transformer punctuation model",
    ),
    "speaker": _Kind(
        "ASR_SPEAKER_MODEL", SPEAKER_MODEL_CLASSES, EngineName.CAMPPLUS, "a CAM++ speaker model"
    ),
}

# funasr's short names for the models we serve (funasr.download.name_maps_from_hub).
HUB_ALIASES = {
    "paraformer-zh-streaming": (
        "iic/speech_paraformer-large_asr_nat-zh-cn-16k-common-vocab8404-online"
    ),
    "paraformer": "iic/speech_paraformer-large_asr_nat-zh-cn-16k-common-vocab8404-pytorch",
    # funasr's "paraformer-zh" is the SeACo model (the offline model of FunASR's Python
    # server); "seaco-paraformer" is ours, for the same.
    "paraformer-zh": (
        "iic/speech_seaco_paraformer_large_asr_nat-zh-cn-16k-common-vocab8404-pytorch"
    ),
    "seaco-paraformer": (
        "iic/speech_seaco_paraformer_large_asr_nat-zh-cn-16k-common-vocab8404-pytorch"
    ),
    "fsmn-vad": "iic/speech_fsmn_vad_zh-cn-16k-common-pytorch",
    "ct-punc": "iic/punc_ct-transformer_cn-en-common-vocab471067-large",
    "ct-punc-c": "iic/punc_ct-transformer_zh-cn-common-vocab272727-pytorch",
    "sensevoice": "iic/SenseVoiceSmall",
    "SenseVoiceSmall": "iic/SenseVoiceSmall",
    "cam++": "iic/speech_campplus_sv_zh-cn_16k-common",
}


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    engine: EngineName
    model_dir: str | None
    description: str


def resolve_model(model: str, cache_dir: str, kind: ModelKind = "streaming") -> ResolvedModel:
    """Find or build the model; may take minutes for ``synthetic:large`` the first time.

    ``kind`` is what is asked for: a streaming Paraformer (``ASR_MODEL``), an offline one
    (``ASR_OFFLINE_MODEL``), an FSMN-VAD (``ASR_VAD_MODEL``) or a CT-Transformer
    (``ASR_PUNC_MODEL``); a directory holding another kind of model is refused.
    """
    variable = KINDS[kind].variable
    if model == EngineName.CHECKSUM and kind == "streaming":
        return ResolvedModel(EngineName.CHECKSUM, None, "checksum (model-free)")
    synthetic = _SYNTHETIC.fullmatch(model)
    if synthetic is not None:
        build = synthetic["build"] or DEFAULT_BUILDS.get(kind, kind)
        size = synthetic["size"]
        if build not in SYNTHETIC_BUILDS or size not in ("tiny", "large"):
            seaco = (
                " (or synthetic-seaco:tiny|large, hotwords; synthetic-sensevoice:tiny|large)"
                if kind == "offline"
                else ""
            )
            raise WorkerLoadError(
                f"{variable}={model}: use synthetic:tiny or synthetic:large{seaco}"
            )
        try:
            path = ensure_synthetic(Path(cache_dir), build, size)
        except WorkerLoadError as exc:
            raise WorkerLoadError(f"{variable}={model}: {exc.message}") from None
        return _from_directory(path, model, kind)  # refuses a build of another kind
    path = Path(model).expanduser()
    if path.is_dir():
        return _from_directory(path.resolve(), model, kind)
    if model.startswith(("/", ".", "~")) or model.count("/") > 1:
        raise WorkerLoadError(f"{variable}={model}: no such directory")
    return _from_directory(_find_or_download(model), model, kind)


# A gateway's pools are prepared at once, each resolving its model in a thread of its own.
# A first build or download imports funasr (or modelscope), whose modules import each other:
# two threads importing them at once meet Python's per-module import locks in opposite
# orders, and importlib raises _DeadlockError (funasr.models.bicif_paraformer,
# ct_transformer, fsmn_vad_streaming: every first start of a 2pass server here). So they
# take turns.
_FIRST_IMPORTS = threading.Lock()

# What workers.models.synthetic builds; "synthetic:SIZE" builds the kind asked for.
SYNTHETIC_BUILDS = ("streaming", "offline", "seaco", "vad", "punc", "sensevoice", "campplus")
DEFAULT_BUILDS: dict[str, str] = {"speaker": "campplus"}  # where a kind's build is named apart
_SYNTHETIC = re.compile(r"synthetic(?:-(?P<build>[a-z]+))?:(?P<size>.*)")


def ensure_synthetic(cache_dir: Path, kind: str, size: str, seed: int = 0) -> Path:
    """Build the synthetic model into the cache unless it is already there.

    A build that cannot be written (a full disk, a read-only cache) raises
    :class:`WorkerLoadError` naming the directory and the cause, and leaves nothing.
    """
    target = cache_dir / f"synthetic-{kind}-{size}-seed{seed}"
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


def _build(target: Path, kind: str, size: str, seed: int) -> None:
    from workers.models.synthetic import build_model_dir

    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: a concurrent, interrupted or failed build never
    # leaves a half-written directory where a worker would load it.
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build_model_dir(staging, kind, size, seed)  # type: ignore[arg-type]
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


def _from_directory(path: Path, name: str, kind: ModelKind = "streaming") -> ResolvedModel:
    info = KINDS[kind]
    if not (path / "config.yaml").is_file():
        raise WorkerLoadError(f"{info.variable}={name}: {path} has no config.yaml")
    found = model_class(path)
    if found not in info.classes:
        raise WorkerLoadError(
            f"{info.variable}={name}: model class {found!r} is not {info.what}"
            f" (supported: {', '.join(info.classes)})"
        )
    return ResolvedModel(CLASS_ENGINES.get(found, info.engine), str(path), f"{name} ({found})")


def _hub_cache_candidates(model_id: str) -> list[Path]:
    root = Path(os.environ.get("MODELSCOPE_CACHE", Path.home() / ".cache" / "modelscope"))
    return [root / "hub" / "models" / model_id, root / "hub" / model_id, root / model_id]


def _find_or_download(name: str) -> Path:
    model_id = HUB_ALIASES.get(name, name)
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
