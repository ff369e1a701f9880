"""What a pool's start does before any worker: the model found or built, exported to ONNX
where its engine runs ONNX, and the spec each worker is started with."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import anyio

from shared.engines import EngineName, Precision, Role
from shared.errors import WorkerLoadError
from shared.messages import EngineSpec
from shared.settings import PoolSettings
from workers.engines import needs_onnx_export, select_engine
from workers.engines.kinds import ENGINES, KindRow
from workers.engines.runtime.onnx_files import punc_up_to_date, up_to_date
from workers.engines.runtime.onnx_session import missing_runtime
from workers.ipc.os_error import describe
from workers.models.ready import REPORTED_FAILURE
from workers.models.resolve import ResolvedModel, resolve_model, unbuilt_synthetic

logger = logging.getLogger(__name__)


async def prepare(settings: PoolSettings) -> tuple[ResolvedModel, list[EngineSpec]]:
    """The model, ready to load, and one spec per worker; :class:`WorkerLoadError` in one
    line when the model cannot be found, built or exported."""
    if settings.engine is not None:
        model = users_model(settings)
    else:
        unbuilt = unbuilt_synthetic(settings.model, settings.model_cache_dir, settings.kind)
        if unbuilt is not None:
            engine = select_engine(unbuilt, settings.runtime, settings.kind)
            if needs_onnx_export(engine):
                # Its first start: built, exported and copied in one child, one funasr import.
                _refuse_without_runtime(engine, settings)
                await _ready_in_child(settings.model, engine, settings)
        model = await anyio.to_thread.run_sync(
            resolve_model, settings.model, settings.model_cache_dir, settings.kind
        )
    punc_model_dir = None
    if settings.punc_model is not None:
        punc = await anyio.to_thread.run_sync(
            resolve_model, settings.punc_model, settings.model_cache_dir, Role.PUNCTUATION
        )
        punc_model_dir = punc.model_dir
    engine = settings.engine or select_engine(model.kind, settings.runtime, settings.kind)
    _refuse_without_runtime(engine, settings)
    row = ENGINES.get(engine)
    if row is not None and row.exported:
        assert model.model_dir is not None, f"{engine} loads the export of a model directory"
        if not await anyio.to_thread.run_sync(
            up_to_date, Path(model.model_dir), settings.onnx_precision, row.qdq
        ):
            await _ready_in_child(model.model_dir, engine, settings)
    if row is not None and row.punctuation_exported and punc_model_dir is not None:
        await ensure_punctuation_export(punc_model_dir)  # its punctuator runs ONNX too
    specs = [
        EngineSpec(
            engine=engine,
            device=device,
            model_dir=model.model_dir,
            threads=settings.threads_per_worker,
            stream_idle_timeout_s=settings.stream_idle_timeout_s,
            precision=settings.onnx_precision,
            mapped_weights=settings.onnx_mapped_weights,
            punc_model_dir=punc_model_dir,
            redecode_window_s=settings.redecode_window_s,
        )
        for device in settings.worker_devices
    ]
    return model, specs


def _refuse_without_runtime(engine: EngineName, settings: PoolSettings) -> None:
    """Before any export: a large model's takes a minute, and its workers would refuse."""
    row = ENGINES.get(engine)
    missing = missing_runtime(settings.devices) if row is not None and row.onnxruntime else None
    if missing is not None:
        raise WorkerLoadError(f"{engine}: {missing}")


async def _ready_in_child(model: str, engine: EngineName, settings: PoolSettings) -> None:
    """``workers.models.ready`` for ``model`` (its setting's value, or its directory): built,
    exported for ``engine`` and, where CPU workers will map them, its graphs' mapped copies
    made, in a child process. Exporting the large model peaks at ~3.7 GB, which the gateway
    process would otherwise keep as resident memory for its whole life."""
    logger.info("making %s ready for %s (%s), once", model, engine, settings.onnx_precision)
    arguments = ["-m", "workers.models.ready", model, "--cache", settings.model_cache_dir]
    arguments += ["--role", settings.kind.value, "--engine", engine]
    arguments += ["--int8"] * (settings.onnx_precision == "int8")
    cpu_workers = any(device == "cpu" for device in settings.worker_devices)
    arguments += ["--mapped"] * (settings.onnx_mapped_weights and cpu_workers)
    await _in_child(f"making {model} ready", arguments, whole_message_status=REPORTED_FAILURE)


def users_model(settings: PoolSettings) -> ResolvedModel:
    """The model of a user's engine (``engine = "package.module:Class"``): its ``model`` as
    given, a directory made absolute, for the engine to make of it what it does; nothing is
    resolved, built or exported for it."""
    assert settings.engine is not None
    path = Path(settings.model).expanduser()
    model_dir = str(path.resolve()) if path.is_dir() else settings.model
    kind = KindRow(settings.engine, settings.kind, ())  # what the user's engine says it is
    return ResolvedModel(kind, model_dir, f"{settings.model} ({settings.engine})")


async def ensure_engine_export(
    engine: EngineName, model_dir: str | None, precision: Precision
) -> None:
    """The export ``engine`` loads, made unless it is up to date (none for an engine that
    loads no export); without the workers' mapped copies (they make their own)."""
    row = ENGINES.get(engine)
    if row is not None and row.exported:
        assert model_dir is not None, f"{engine} loads the export of a model directory"
        if await anyio.to_thread.run_sync(up_to_date, Path(model_dir), precision, row.qdq):
            return
        int8 = (["--int8", "--qdq"] if row.qdq else ["--int8"]) if precision == "int8" else []
        arguments = ["-m", "workers.models.export", model_dir, *int8]
        await _in_child(f"ONNX export of {model_dir}", arguments)


async def ensure_punctuation_export(model_dir: str) -> None:
    """Export the CT-Transformer to ONNX unless it is up to date; in a child, like the
    Paraformer's export, so that torch never enters the gateway process."""
    if await anyio.to_thread.run_sync(punc_up_to_date, Path(model_dir)):
        return
    logger.info("exporting %s to ONNX, once", model_dir)
    await _in_child(
        f"ONNX export of {model_dir}", ["-m", "workers.models.export.punctuation", model_dir]
    )


async def _in_child(
    what: str, arguments: list[str], whole_message_status: int | None = None
) -> None:
    """``python ARGUMENTS`` run to its end; a failure raises :class:`WorkerLoadError` with
    the last line it wrote on stderr: as it is where it exited with ``whole_message_status``
    (the child's own one-line message), else after "WHAT failed: "."""
    try:
        result = await anyio.run_process([sys.executable, *arguments], check=False)
    except OSError as exc:  # no descriptor for its pipes, no memory to fork
        raise WorkerLoadError(f"{what} could not start: {describe(exc)}") from None
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        last = lines[-1] if lines else f"exit status {result.returncode}"
        whole = result.returncode == whole_message_status and lines
        raise WorkerLoadError(last if whole else f"{what} failed: {last}")
