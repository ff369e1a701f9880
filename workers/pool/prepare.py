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
from workers.engines import select_engine
from workers.engines.kinds import ENGINES, KindRow
from workers.engines.runtime.onnx_files import punc_up_to_date, up_to_date
from workers.engines.runtime.onnx_session import missing_runtime
from workers.ipc.os_error import describe
from workers.models.resolve import ResolvedModel, resolve_model

logger = logging.getLogger(__name__)


async def prepare(settings: PoolSettings) -> tuple[ResolvedModel, list[EngineSpec]]:
    """The model, ready to load, and one spec per worker; :class:`WorkerLoadError` in one
    line when the model cannot be found, built or exported."""
    if settings.engine is not None:
        model = users_model(settings)
    else:
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
    row = ENGINES.get(engine)
    missing = missing_runtime(settings.devices) if row is not None and row.onnxruntime else None
    if missing is not None:
        # Before the export: a large model's takes minutes, and its workers would refuse.
        raise WorkerLoadError(f"{engine}: {missing}")
    await ensure_engine_export(engine, model.model_dir, settings.onnx_precision)
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
    loads no export)."""
    row = ENGINES.get(engine)
    if row is not None and row.exported:
        assert model_dir is not None, f"{engine} loads the export of a model directory"
        await ensure_onnx_export(model_dir, precision, row.qdq)


async def ensure_onnx_export(model_dir: str, precision: Precision, qdq: bool = False) -> None:
    """Export the model to ONNX unless an up-to-date export is there already (``qdq``:
    its int8 in the form OpenVINO reads).

    In a child process: exporting the large model peaks at ~3.7 GB, which the gateway process
    would otherwise keep as resident memory for its whole life.
    """
    if await anyio.to_thread.run_sync(up_to_date, Path(model_dir), precision, qdq):
        return
    logger.info("exporting %s to ONNX (%s%s), once", model_dir, precision, " QDQ" * qdq)
    int8 = (["--int8", "--qdq"] if qdq else ["--int8"]) if precision == "int8" else []
    await _export_in_child(model_dir, ["-m", "workers.models.export", model_dir, *int8])


async def ensure_punctuation_export(model_dir: str) -> None:
    """Export the CT-Transformer to ONNX unless it is up to date; in a child, like the
    Paraformer's export, so that torch never enters the gateway process."""
    if await anyio.to_thread.run_sync(punc_up_to_date, Path(model_dir)):
        return
    logger.info("exporting %s to ONNX, once", model_dir)
    await _export_in_child(model_dir, ["-m", "workers.models.export.punctuation", model_dir])


async def _export_in_child(model_dir: str, arguments: list[str]) -> None:
    try:
        result = await anyio.run_process([sys.executable, *arguments], check=False)
    except OSError as exc:  # no descriptor for its pipes, no memory to fork
        raise WorkerLoadError(
            f"ONNX export of {model_dir} could not start: {describe(exc)}"
        ) from None
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        raise WorkerLoadError(
            f"ONNX export of {model_dir} failed: {detail[-1] if detail else result.returncode}"
        )
