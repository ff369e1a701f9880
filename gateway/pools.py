"""The models' pools, started together and stopped together.

Every pool of every model loads at once (``WorkerPool.load`` in a task each: start-up takes
as long as the slowest model, not the sum), then each is supervised from the lifespan's own
task, which closes them. A shared companion is one pool. A model that fails to load fails
the start in one line that names it; nothing that did load is left running.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from gateway.limits.model_places import ModelPlaces
from gateway.metrics import GatewayMetrics, PoolLabels
from gateway.models.table import ModelTable, PoolEntry
from gateway.session.serving import ServedModel
from shared.errors import WorkerLoadError
from shared.messages import StreamResult
from workers.pool import WorkerPool

logger = logging.getLogger(__name__)

# Each pool's workers' ``worker`` label: ``N``, ``offline-N``, ``vad-N``.
WORKER_PREFIX = {"streaming": "", "offline": "offline", "vad": "vad", "speaker": "speaker"}


class ModelLoadError(Exception):
    """A model could not be loaded; the message is one line naming it."""


@asynccontextmanager
async def served_models(
    table: ModelTable, metrics: GatewayMetrics
) -> AsyncIterator[dict[str, ServedModel]]:
    pools = {entry: _pool(entry, metrics) for entry in table.pool_entries}
    loaded: list[WorkerPool] = []
    supervised: list[WorkerPool] = []
    try:
        try:
            async with anyio.create_task_group() as group:
                for entry, pool in pools.items():
                    group.start_soon(_load, entry, pool, loaded, table.from_file)
        except BaseExceptionGroup as group_error:
            load_errors = group_error.subgroup(ModelLoadError)
            if load_errors is not None:
                raise _first(load_errors) from None
            raise
        for pool in pools.values():
            await pool.supervise()
            supervised.append(pool)
        for entry, pool in pools.items():
            _log_started(entry, pool)
        metrics.watch_workers(
            {
                PoolLabels(entry.name, WORKER_PREFIX[entry.settings.kind]): pool.status
                for entry, pool in pools.items()
            }
        )
        yield {
            choice.name: ServedModel(
                choice.name,
                pools[choice.streaming],
                {role: pools[entry] for role, entry in choice.companions.items()},
                ModelPlaces(choice.name, choice.max_sessions),
            )
            for choice in table.choices
        }
    finally:
        metrics.watch_workers({})
        # Last started, first stopped; a pool loaded and never supervised is stopped too.
        for pool in reversed(list(pools.values())):
            if pool in loaded or pool in supervised:
                await pool.aclose()


def _pool(entry: PoolEntry, metrics: GatewayMetrics) -> WorkerPool:
    labels = PoolLabels(entry.name, WORKER_PREFIX[entry.settings.kind])

    def observe(worker: int, result: StreamResult) -> None:
        metrics.observe_result(labels, worker, result)

    return WorkerPool(entry.settings, on_result=observe)


async def _load(entry: PoolEntry, pool: WorkerPool, loaded: list[WorkerPool], named: bool) -> None:
    try:
        await pool.load()
    except WorkerLoadError as exc:
        # From a models file, the entry says which of several models could not load.
        where = f"[models.{entry.name}] " if named else ""
        raise ModelLoadError(f"{where}{exc.message}") from None
    loaded.append(pool)


def _first(group: BaseExceptionGroup[ModelLoadError]) -> ModelLoadError:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, ModelLoadError)
    return error


def _log_started(entry: PoolEntry, pool: WorkerPool) -> None:
    settings = pool.settings
    description = pool.model.description if pool.model else settings.model
    punctuated = f", punctuated by {settings.punc_model}" if settings.punc_model else ""
    logger.info(
        "%s %s: %s with the %s engine on %s (%d workers, %s transport)%s",
        settings.kind,
        entry.name,
        description,
        pool.engine,
        ",".join(settings.devices),
        len(settings.worker_devices),
        settings.transport,
        punctuated,
    )
