"""The pool's seats: one per worker place, one device each, and whichever worker process
holds it now; which seat a new stream goes to (``choose_seat``, by its ``Urgency``); what
each reports (``WorkerStatus``), and whether they serve (``seats_health``); the pool's
workers started together (``start_all``) and let go of (``release_all``)."""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from shared.engines import EngineName
from shared.errors import OverCapacityError, WorkerLoadError
from shared.messages import EngineSpec
from shared.settings import PoolSettings
from workers.pool.handle import WorkerHandle, WorkerState


class Urgency(enum.Enum):
    """Which class of work a stream is, in a pool whose workers run niced
    (``PoolSettings.worker_nice``, ASR_OFFLINE_NICE) with some seats kept at nice 0
    (``urgent_seats``). Elsewhere every seat takes either."""

    # Someone waits for it now: a 2pass utterance's last sentence, whose result is the
    # final after the end of input. Served by a nice-0 seat, at the streaming workers'
    # priority.
    URGENT = "urgent"
    # The rest: a 2pass sentence before the last (its 2pass-offline result mid-stream),
    # offline-mode utterances, files. Served by the niced seats, behind every stream's
    # chunks.
    BACKGROUND = "background"


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
    nice: int = 0  # how much lower than the gateway it runs (Unix nice)
    urgent: bool = False  # kept at nice 0 for urgent streams (Urgency.URGENT)


@dataclass(slots=True)
class Seat:
    """A place in the pool: one device, and whichever worker process holds it now."""

    index: int
    spec: EngineSpec
    handle: WorkerHandle
    urgent: bool = False  # kept for urgent streams, at nice 0 (``urgent_seats``)
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
            nice=self.handle.nice,
            urgent=self.urgent,
        )


def urgent_seats(settings: PoolSettings) -> int:
    """How many of the pool's seats (the first ones) are kept at nice 0 for urgent streams:
    ``urgent_workers`` of a niced pool, but never every seat (background work must have
    one that runs niced, or it would take the partials' cores); none where the pool is not
    niced, whose seats all take either class."""
    if settings.worker_nice == 0:
        return 0
    return min(settings.urgent_workers, len(settings.worker_devices) - 1)


def seat_nice(settings: PoolSettings, index: int) -> int:
    """The nice value of seat ``index``'s worker: 0 for an urgent seat, else the pool's."""
    return 0 if index < urgent_seats(settings) else settings.worker_nice


def choose_seat(seats: Sequence[Seat], urgency: Urgency) -> Seat:
    """The seat a new stream of ``urgency`` goes to: the least loaded ready seat of its
    class (fewest open streams, then fewest given so far).

    A stream goes to a seat of the other class only when its own class has no seat ready
    (its workers are restarting): an urgent decode on a niced worker is slow, a background
    one on a nice-0 worker takes cores from the partials for a while, and either is better
    than failing the session. Not otherwise: an urgent stream does not borrow an idle
    niced seat, where it would run behind every stream's chunks; it waits for its own
    seat's step, whose next one takes it with every other urgent stream waiting.
    """
    ready = [s for s in seats if s.handle.state is WorkerState.READY]
    if not ready:
        raise OverCapacityError("no worker is ready (all are starting or restarting)")
    own = [s for s in ready if s.urgent is (urgency is Urgency.URGENT)]
    return min(own or ready, key=lambda s: (len(s.handle.streams), s.assigned))


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
