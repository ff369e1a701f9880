"""The worker pool: spawned workers, sticky streams, restarts, and the library API.

Usage from any AnyIO or asyncio code::

    async with WorkerPool(PoolSettings(model="synthetic:tiny")) as pool:
        text = await pool.transcribe(samples)          # a whole utterance
        async with pool.open_stream() as stream:        # or stream it
            ...
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from types import TracebackType

import anyio
import anyio.abc

from shared.engines import EngineCapabilities, EngineName
from shared.errors import ShuttingDownError, WorkerError
from shared.messages import (
    Decoded,
    EngineSpec,
    SlotsFreed,
    StreamExpired,
    StreamFailed,
    StreamOptions,
    StreamResult,
    WorkerMessage,
    WorkerStats,
)
from shared.settings import PoolSettings
from workers.engines import EngineLoader, load_engine
from workers.models.resolve import ResolvedModel
from workers.pool.handle import KILL_GRACE_S, WorkerHandle, WorkerState
from workers.pool.prepare import prepare
from workers.pool.seats import (
    Seat,
    Urgency,
    WorkerStatus,
    choose_seat,
    release_all,
    seat_nice,
    seats_health,
    start_all,
    urgent_seats,
)
from workers.pool.stream import Audio, AudioStream, decode_whole
from workers.pool.watchdogs import Loss, watch_for_exit, watch_for_hang

logger = logging.getLogger(__name__)

RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
ResultObserver = Callable[[int, StreamResult], None]


class WorkerPool:
    """Spawned model workers, one or more per device, behind one async API.

    No fault of one worker ends the pool. Each worker has a supervisor task, which routes
    its results, writes its commands and watches it for a hang; whatever goes wrong there
    (the worker exits, sends something unreadable, its pipe breaks, routing or an
    ``on_result`` observer raises) fails that worker's streams with :class:`WorkerError`,
    kills and reaps the worker, releases its slab and starts a replacement. A supervisor
    never lets an exception out: its own bug ends that seat only, which ``health`` reports.

    Why the supervisors' task group is entered by ``start()`` in the caller's task and left
    by ``aclose()``, rather than run by a task of the pool's own: AnyIO offers no task
    outside a task group (a bare ``create_task`` would tie the pool to asyncio), and the
    library API is ``await pool.start()`` ... ``await pool.aclose()`` from one task (the
    gateway's lifespan). A child of that task group that raised would cancel the caller's
    scope, so none does: every supervisor swallows its errors as above. ``aclose`` stops
    and releases every worker and slab under a shield, so a caller cancelled meanwhile
    still leaves nothing behind; the task group is then exited unshielded (its scope must
    be the innermost one), with no task left in it. So: call ``start()`` and ``aclose()``
    from the same task, nested like any other context (``async with pool`` does).

    ``engine_loader`` builds the engine in each worker (``workers.engines.load_engine`` by
    default): a module-level function, as it is pickled by name into spawned workers; it
    serves engines from outside this package, and tests' engines that fail on demand.
    """

    def __init__(
        self,
        settings: PoolSettings,
        *,
        on_result: ResultObserver | None = None,
        engine_loader: EngineLoader = load_engine,
    ) -> None:
        self.settings = settings
        self.model: ResolvedModel | None = None
        self._on_result = on_result
        self._engine_loader = engine_loader
        self._seats: list[Seat] = []
        self._stream_ids = itertools.count(1)
        self._stopping = False
        self._task_group: anyio.abc.TaskGroup | None = None
        self._state_changed = anyio.Event()
        self._capabilities: EngineCapabilities | None = None
        self._engine_name: EngineName | None = None  # as the workers call their engine

    # -- life cycle -----------------------------------------------------------------

    async def __aenter__(self) -> WorkerPool:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Resolve the model, spawn every worker and wait until all have loaded it; then
        supervise them. Fails loudly with the first worker's own error; no worker is left
        running then."""
        await self.load()
        await self.supervise()

    async def load(self) -> None:
        """``start``'s first half, which may run in any task: several pools load at once.
        ``supervise`` must follow in the task that will call ``aclose``."""
        settings = self.settings
        self.model, specs = await prepare(settings)
        handles = [self._handle(i, spec) for i, spec in enumerate(specs)]
        await start_all(handles)
        # Every worker runs the same engine on the same model: the first one speaks for all.
        assert handles[0].ready is not None
        self._capabilities = handles[0].ready.capabilities
        self._engine_name = handles[0].ready.engine
        urgent = urgent_seats(settings)
        self._seats = [Seat(h.index, h.spec, h, urgent=h.index < urgent) for h in handles]

    def _handle(self, index: int, spec: EngineSpec) -> WorkerHandle:
        nice = seat_nice(self.settings, index)
        return WorkerHandle(index, spec, self.settings, self._engine_loader, nice=nice)

    async def supervise(self) -> None:
        """Keep the loaded workers served (their task group is entered in this task)."""
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        for seat in self._seats:
            seat.stopped = anyio.Event()
            self._task_group.start_soon(self._supervise, seat, name=f"worker-{seat.index}")

    async def wait_ready(self) -> None:
        """Wait until every worker is ready (after a restart, say)."""
        while not self.ready:
            await self._state_changed.wait()

    def _notify_state_change(self) -> None:
        self._state_changed.set()
        self._state_changed = anyio.Event()

    async def aclose(self) -> None:
        """Stop every worker: a STOP sentinel, a join with a timeout, then kill.

        Streams still open fail with :class:`ShuttingDownError`. Every process is reaped and
        every slab released even if the caller is cancelled meanwhile. Safe to call twice.
        """
        if self._task_group is None:
            await release_all([seat.handle for seat in self._seats])  # loaded, not supervised
            self._seats = []
            return
        self._stopping = True
        with anyio.CancelScope(shield=True):
            for seat in self._seats:
                seat.handle.request_stop()
            with anyio.move_on_after(self.settings.stop_timeout_s):
                await self._supervisors_ended()
            for seat in self._seats:
                seat.handle.kill()  # past the timeout; each supervisor then reaps its worker
            # A killed worker is reaped within the kill grace; a supervisor still running
            # past that is cancelled below, and releases its worker in its shielded cleanup.
            with anyio.move_on_after(2 * KILL_GRACE_S):
                await self._supervisors_ended()
        task_group, self._task_group = self._task_group, None
        if not all(seat.stopped is not None and seat.stopped.is_set() for seat in self._seats):
            task_group.cancel_scope.cancel()
        # Not shielded: a task group's scope must be the innermost one when it is exited.
        await task_group.__aexit__(None, None, None)

    async def _supervisors_ended(self) -> None:
        for seat in self._seats:
            assert seat.stopped is not None
            await seat.stopped.wait()

    async def _supervise(self, seat: Seat) -> None:
        """Keep the seat served; never raises but for cancellation (see the class doc)."""
        assert seat.stopped is not None
        try:
            await self._keep_served(seat)
        except Exception as exc:  # a bug of ours: end this seat, never the pool
            seat.ended = f"its supervisor failed: {type(exc).__name__}: {exc}"
            logger.error("worker %d: %s; the seat is lost", seat.index, seat.ended, exc_info=exc)
        finally:
            # Whatever ended the supervision (a stop, a cancellation, a bug), the worker
            # it held is killed and reaped, and its pipes and slab are released.
            with anyio.CancelScope(shield=True):
                handle = seat.handle
                handle.kill()
                await handle.reap(timeout=0)
                if self._stopping or not seat.ended:
                    handle.fail_streams(ShuttingDownError("the server is shutting down"))
                else:
                    handle.fail_streams(
                        WorkerError(
                            f"worker {seat.index} is lost ({seat.ended}); the stream is lost"
                        )
                    )
                handle.close()
            seat.stopped.set()
            self._notify_state_change()

    async def _keep_served(self, seat: Seat) -> None:
        """Serve the worker; when it is lost, fail its streams and replace it."""
        while True:
            handle = seat.handle
            loss = await self._serve(seat, handle)
            with anyio.CancelScope(shield=True):
                exit_code = await handle.reap()
            if self._stopping:
                handle.fail_streams(ShuttingDownError("the server is shutting down"))
                handle.close()
                return
            seat.lost_at = time.monotonic()
            seat.failed_restarts = 0
            cause = (
                loss.cause
                if loss is not None
                else f"quit ({handle.quit_reason})"
                if handle.quit_reason is not None
                else f"died (exit code {exit_code})"
            )
            error = loss.error if loss is not None else None
            logger.error("worker %d (pid %s) %s", seat.index, handle.pid, cause, exc_info=error)
            handle.fail_streams(
                WorkerError(f"worker {seat.index} ({seat.spec.device}) {cause}; the stream is lost")
            )
            handle.close()
            self._notify_state_change()
            replacement = await self._replace(seat)
            if replacement is None:
                return
            seat.handle = replacement
            seat.lost_at = None
            seat.failed_restarts = 0
            self._notify_state_change()

    async def _serve(self, seat: Seat, handle: WorkerHandle) -> Loss | None:
        """Route the worker's results, write its commands and watch it for a hang, until
        its results pipe ends (or, that pipe closed under the pool, a moment after the
        worker exits). ``None`` if it simply exited; else why it was given up."""
        losses: list[Loss] = []

        def lose(loss: Loss) -> None:
            if not losses:
                losses.append(loss)
            handle.kill()  # its results pipe then ends, which ends the reader

        async def guarded(run: Callable[[], Awaitable[None]], what: str) -> None:
            try:
                await run()
            except WorkerError as exc:  # the worker's fault, said in one line
                lose(Loss(f"{exc.message}; it was killed"))
            except Exception as exc:
                kind = f"{type(exc).__name__}: {exc}"
                lose(Loss(f"was killed: {what} raised {kind}", exc))

        async with anyio.create_task_group() as group:
            group.start_soon(
                guarded, partial(watch_for_hang, handle, self.settings, lose), "the watchdog"
            )
            group.start_soon(guarded, handle.flush_commands, "writing its commands")
            group.start_soon(watch_for_exit, handle, lose, group.cancel_scope)
            await guarded(partial(handle.read_messages, self._route), "routing its results")
            group.cancel_scope.cancel()
        return losses[0] if losses else None

    async def _replace(self, seat: Seat) -> WorkerHandle | None:
        for attempt in itertools.count():
            if self._stopping:
                return None
            handle = self._handle(seat.index, seat.spec)
            seat.handle = handle  # visible as "starting" in status() meanwhile
            try:
                await handle.start()
            except Exception as exc:
                with anyio.CancelScope(shield=True):
                    handle.kill()
                    await handle.reap(timeout=0)
                handle.close()
                if self._stopping:
                    return None  # killed by aclose while loading
                seat.failed_restarts += 1
                seat.restart_error = str(exc)
                logger.error("worker %d failed to restart: %s", seat.index, exc)
                await anyio.sleep(RESTART_BACKOFF_S[min(attempt, len(RESTART_BACKOFF_S) - 1)])
                continue
            seat.restarts += 1
            logger.warning("worker %d replaced (pid %s)", seat.index, handle.pid)
            return handle
        return None  # pragma: no cover - itertools.count never ends

    def _route(self, handle: WorkerHandle, message: WorkerMessage) -> None:
        match message:
            case SlotsFreed(slots=slots):
                handle.release_slots(slots)
            case StreamResult():
                sink = handle.streams.get(message.stream_id)
                if message.is_final:
                    handle.streams.pop(message.stream_id, None)
                if self._on_result is not None:
                    self._on_result(handle.index, message)
                if sink is not None:
                    sink.deliver(message)
            case StreamFailed() | StreamExpired():
                sink = handle.streams.pop(message.stream_id, None)
                if sink is not None:
                    sink.deliver(message)
            case WorkerStats():
                pass  # the handle keeps the count
            case _:
                logger.debug("worker %d: %r", handle.index, message)

    # -- streams --------------------------------------------------------------------

    @property
    def capabilities(self) -> EngineCapabilities | None:
        """What the workers' engine does, as they reported it; ``None`` before ``start``."""
        return self._capabilities

    @property
    def text_is_delta(self) -> bool:  # each result's text is new text, not a running value
        return self._capabilities is not None and self._capabilities.text_is_delta

    @property
    def session_places(self) -> int:  # EngineCapabilities.session_places (1 before start)
        return self._capabilities.session_places if self._capabilities is not None else 1

    @property
    def regions(self) -> bool:  # EngineCapabilities.regions: each stream a speech region
        return self._capabilities is not None and self._capabilities.regions

    @property
    def engine(self) -> EngineName | None:
        """The engine the workers run, by the name they report (``paraformer-onnx`` under
        ASR_RUNTIME=onnx; a user's engine's own ``name``); ``None`` before ``start``."""
        if self._engine_name is not None:
            return self._engine_name
        return self._seats[0].spec.engine if self._seats else None

    def open_stream(
        self, options: StreamOptions | None = None, urgency: Urgency = Urgency.BACKGROUND
    ) -> AudioStream:
        """Bind a new stream to the ready worker with the fewest active streams (of those
        that serve its ``urgency``, in a niced pool: ``seats.choose_seat``).

        Use as ``async with pool.open_stream() as stream``; the stream stays on that worker.
        """
        if self._stopping or self._task_group is None:
            raise ShuttingDownError("the worker pool is not running")
        seat = choose_seat(self._seats, urgency)
        seat.assigned += 1
        stream = AudioStream(
            next(self._stream_ids) & 0xFFFFFFFF, seat.handle, self.settings.stream_window
        )
        seat.handle.open_stream(stream.stream_id, options or StreamOptions(), stream)
        return stream

    async def transcribe(
        self,
        audio: Audio,
        options: StreamOptions | None = None,
        urgency: Urgency = Urgency.BACKGROUND,
    ) -> str:
        """Decode a whole utterance and return its text."""
        return (await self.decode(audio, options, urgency)).text

    async def decode(
        self,
        audio: Audio,
        options: StreamOptions | None = None,
        urgency: Urgency = Urgency.BACKGROUND,
    ) -> Decoded:
        """Decode a whole utterance: its text, and what else the model says of it (token
        times, sentences, tags, speakers), as its last result carries it."""
        async with self.open_stream(options, urgency) as stream:
            return await decode_whole(stream, audio, text_is_delta=self.text_is_delta)

    # -- status ---------------------------------------------------------------------

    def status(self) -> list[WorkerStatus]:
        model = self.model.description if self.model else ""
        return [seat.status(model) for seat in self._seats]

    @property
    def ready(self) -> bool:
        return bool(self._seats) and all(
            seat.handle.state is WorkerState.READY for seat in self._seats
        )

    @property
    def health(self) -> str | None:
        """``None`` while the pool serves or will again by itself; else one line saying why
        it cannot (for ``/healthz``: a process manager should restart the server).

        Not healthy: a seat whose supervisor has ended while the pool is not stopping (its
        worker is gone and nothing will replace it); or every seat without a worker, each
        having failed to restart at least once, for more than ``unhealthy_after_s`` (60 s
        by default: past a few restart attempts, the model or device is not coming back by
        itself). A slow restart that has not failed yet is not unhealthy, nor is a pool
        being stopped: ``ready`` says whether streams can open.
        """
        if self._stopping:
            return None
        if self._task_group is None:
            return "the worker pool has not been started"
        return seats_health(self._seats, self.settings.unhealthy_after_s)
