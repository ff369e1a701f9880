"""The pool's seats: one per worker place, one device each, and whichever worker process
holds it now; what each reports (``WorkerStatus``), and whether they serve (``seats_health``);
the pool's workers started together (``start_all``) and let go of (``release_all``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from shared.engines import EngineName
from shared.errors import WorkerLoadError
from shared.messages import EngineSpec
from workers.pool.handle import WorkerHandle, WorkerState


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    index: int
    device: str
    engine: EngineName
    model: str
    state: WorkerState
    pid: int | None
    active_streams: int
    free_slots: int
    engine_streams: int
    restarts: int
    # What its models really run on, as the worker said (None: not said, or not ready).
    provider: str | None = None
    gpu_memory_bytes: int | None = None  # its own figure (workers.worker.gpu_memory)


@dataclass(slots=True)
class Seat:
    """A place in the pool: one device, and whichever worker process holds it now."""

    index: int
    spec: EngineSpec
    handle: WorkerHandle
    restarts: int = 0
    assigned: int = 0
    stopped: anyio.Event | None = None  # set when its supervisor has ended
    lost_at: float | None = None  # when its last worker was lost; None while one serves
    failed_restarts: int = 0  # since then
    restart_error: str = ""  # the last of them
    ended: str = ""  # why its supervisor ended, when that was not the pool's stop

    def status(self, model: str) -> WorkerStatus:
        return WorkerStatus(
            index=self.index,
            device=self.spec.device,
            # As the worker calls its engine once ready (a user's engine: its own name).
            engine=self.handle.ready.engine if self.handle.ready else self.spec.engine,
            model=model,
            state=self.handle.state,
            pid=self.handle.pid,
            active_streams=len(self.handle.streams),
            free_slots=self.handle.free_slots,
            engine_streams=self.handle.engine_streams,
            restarts=self.restarts,
            provider=self.handle.ready.provider if self.handle.ready else None,
            gpu_memory_bytes=self.handle.gpu_memory_bytes,
        )


def seats_health(seats: Sequence[Seat], unhealthy_after_s: float) -> str | None:
    """Why started seats cannot serve (one line), or None: a seat whose supervisor ended,
    or every seat without a worker, each having failed to restart, for longer than
    ``unhealthy_after_s``."""
    for seat in seats:
        if seat.stopped is not None and seat.stopped.is_set():
            reason = seat.ended or "its supervisor ended"
            return f"worker {seat.index} ({seat.spec.device}) is not served: {reason}"
    lost = [seat.lost_at for seat in seats if seat.failed_restarts]
    if len(lost) == len(seats) and all(at is not None for at in lost):
        down_s = time.monotonic() - max(at for at in lost if at is not None)
        if down_s > unhealthy_after_s:
            return (
                f"no worker has served for {down_s:.0f} s: every restart fails"
                f" (worker {seats[-1].index}: {seats[-1].restart_error})"
            )
    return None


async def start_all(handles: Sequence[WorkerHandle]) -> None:
    """Start every worker at once and wait until all have loaded; on any failure none is
    left running, and the first worker's own ``WorkerLoadError`` is raised."""
    errors: list[BaseException] = []

    async def start_one(handle: WorkerHandle) -> None:
        try:
            await handle.start()
        except BaseException as exc:
            errors.append(exc)
            raise

    try:
        async with anyio.create_task_group() as group:
            for handle in handles:
                group.start_soon(start_one, handle)
    except BaseException:
        await release_all(handles)
        load_errors = [e for e in errors if isinstance(e, WorkerLoadError)]
        if load_errors:
            raise load_errors[0] from None
        raise


async def release_all(handles: Sequence[WorkerHandle]) -> None:
    """Kill, reap and close workers that no supervisor looks after, even if cancelled."""
    with anyio.CancelScope(shield=True):
        for handle in handles:
            handle.kill()
            await handle.reap(timeout=0)
            handle.close()
