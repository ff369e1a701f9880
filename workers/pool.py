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
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc

from shared.errors import OverCapacityError, ShuttingDownError, WorkerError, WorkerLoadError
from shared.messages import (
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
from workers.export import up_to_date
from workers.handle import WorkerHandle, WorkerState
from workers.models import ResolvedModel, resolve_model
from workers.stream import Audio, AudioStream

logger = logging.getLogger(__name__)

RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0)
ResultObserver = Callable[[int, StreamResult], None]


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    timestamps: tuple[tuple[int, int], ...]  # ms, per token; empty if the model has none


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    index: int
    device: str
    engine: str
    model: str
    state: str
    pid: int | None
    active_streams: int
    free_slots: int
    engine_streams: int
    restarts: int


@dataclass(slots=True)
class _Seat:
    """A place in the pool: one device, and whichever worker process holds it now."""

    index: int
    spec: EngineSpec
    handle: WorkerHandle
    restarts: int = 0
    assigned: int = 0
    stopped: anyio.Event | None = None


async def ensure_onnx_export(model_dir: str, precision: str) -> None:
    """Export the model to ONNX unless an up-to-date export is there already.

    In a child process: exporting the large model peaks at ~3.7 GB, which the gateway process
    would otherwise keep as resident memory for its whole life.
    """
    if await anyio.to_thread.run_sync(up_to_date, Path(model_dir), precision):
        return
    logger.info("exporting %s to ONNX (%s), once", model_dir, precision)
    command = [sys.executable, "-m", "workers.export", model_dir]
    if precision == "int8":
        command.append("--int8")
    result = await anyio.run_process(command, check=False)
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        raise WorkerLoadError(
            f"ONNX export of {model_dir} failed: {detail[-1] if detail else result.returncode}"
        )


class WorkerPool:
    """Spawned model workers, one or more per device, behind one async API."""

    def __init__(self, settings: PoolSettings, *, on_result: ResultObserver | None = None) -> None:
        self.settings = settings
        self.model: ResolvedModel | None = None
        self._on_result = on_result
        self._seats: list[_Seat] = []
        self._stream_ids = itertools.count(1)
        self._stopping = False
        self._task_group: anyio.abc.TaskGroup | None = None
        self._state_changed = anyio.Event()

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
        """Resolve the model, spawn every worker and wait until all have loaded it.

        Fails loudly with the first worker's own error; no worker is left running then.
        """
        settings = self.settings
        self.model = await anyio.to_thread.run_sync(
            resolve_model, settings.model, settings.model_cache_dir, settings.kind
        )
        punc_model_dir = None
        if settings.punc_model is not None:
            punc = await anyio.to_thread.run_sync(
                resolve_model, settings.punc_model, settings.model_cache_dir, "punc"
            )
            punc_model_dir = punc.model_dir
        engine = self.model.engine
        if engine == "paraformer" and settings.engine == "paraformer-onnx":
            assert self.model.model_dir is not None
            await ensure_onnx_export(self.model.model_dir, settings.onnx_precision)
            engine = "paraformer-onnx"
        specs = [
            EngineSpec(
                engine=engine,
                device=device,
                model_dir=self.model.model_dir,
                threads=settings.threads_per_worker,
                stream_idle_timeout_s=settings.stream_idle_timeout_s,
                precision=settings.onnx_precision,
                punc_model_dir=punc_model_dir,
            )
            for device in settings.worker_devices
        ]
        handles = [WorkerHandle(i, spec, settings) for i, spec in enumerate(specs)]
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
            for handle in handles:
                handle.kill()
                await handle.reap(timeout=0)
                handle.close()
            load_errors = [e for e in errors if isinstance(e, WorkerLoadError)]
            if load_errors:
                raise load_errors[0] from None
            raise
        self._seats = [_Seat(h.index, h.spec, h) for h in handles]
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
        """Stop every worker: a STOP sentinel, a join with a timeout, then terminate/kill.

        Streams still open fail with :class:`ShuttingDownError`. Safe to call twice.
        """
        if self._task_group is None:
            return
        self._stopping = True
        for seat in self._seats:
            seat.handle.request_stop()
        with anyio.move_on_after(self.settings.stop_timeout_s):
            for seat in self._seats:
                assert seat.stopped is not None
                await seat.stopped.wait()
        for seat in self._seats:
            seat.handle.kill()  # past the timeout; each supervisor then reaps its worker
        # The task group must be exited from the scope it was entered in, so no shield
        # here: the supervisors it waits for shield their own cleanup.
        task_group, self._task_group = self._task_group, None
        await task_group.__aexit__(None, None, None)

    async def _supervise(self, seat: _Seat) -> None:
        """Route the worker's messages; when it exits, fail its streams and replace it."""
        assert seat.stopped is not None
        try:
            while True:
                handle = seat.handle
                async with anyio.create_task_group() as group:
                    group.start_soon(self._watch_for_hang, seat, handle)
                    group.start_soon(handle.flush_commands)
                    await handle.read_messages(self._route)
                    group.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    exit_code = await handle.reap()
                if self._stopping:
                    handle.fail_streams(ShuttingDownError("the server is shutting down"))
                    handle.close()
                    return
                if handle.killed_as_hung:
                    cause = (
                        f"sent no result for {self.settings.step_timeout_s:g} s"
                        " (ASR_WORKER_STEP_TIMEOUT) and was killed"
                    )
                else:
                    cause = f"died (exit code {exit_code})"
                logger.error("worker %d (pid %s) %s", seat.index, handle.pid, cause)
                handle.fail_streams(
                    WorkerError(
                        f"worker {seat.index} ({seat.spec.device}) {cause}; the stream is lost"
                    )
                )
                handle.close()
                self._notify_state_change()
                replacement = await self._replace(seat)
                if replacement is None:
                    return
                seat.handle = replacement
                self._notify_state_change()
        finally:
            seat.stopped.set()

    async def _watch_for_hang(self, seat: _Seat, handle: WorkerHandle) -> None:
        """Kill the worker if it owes results and has sent none for the step timeout.

        A hung worker (a stuck kernel, a deadlock in native code) would otherwise hold its
        sessions forever; killed, it fails them with 1011 and is replaced like a crash.
        """
        timeout = self.settings.step_timeout_s
        while True:
            await anyio.sleep(min(1.0, timeout / 4))
            if handle.seconds_without_progress() > timeout:
                logger.error(
                    "worker %d (pid %s) owes results and sent none for %g s: killing it",
                    seat.index,
                    handle.pid,
                    timeout,
                )
                handle.kill_as_hung()
                return

    async def _replace(self, seat: _Seat) -> WorkerHandle | None:
        for attempt in itertools.count():
            if self._stopping:
                return None
            handle = WorkerHandle(seat.index, seat.spec, self.settings)
            seat.handle = handle  # visible as "starting" in status() meanwhile
            try:
                await handle.start()
            except Exception as exc:
                logger.error("worker %d failed to restart: %s", seat.index, exc)
                handle.kill()
                await handle.reap(timeout=0)
                handle.close()
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
    def text_is_delta(self) -> bool:
        """Whether each result's text is new text (streaming models) or a running value."""
        return self.model is not None and self.model.engine != "checksum"

    @property
    def engine(self) -> str:
        """The engine the workers run (``paraformer-onnx`` when ASR_ENGINE selects it)."""
        return self._seats[0].spec.engine if self._seats else ""

    def open_stream(self, options: StreamOptions | None = None) -> AudioStream:
        """Bind a new stream to the ready worker with the fewest active streams.

        Use as ``async with pool.open_stream() as stream``; the stream stays on that worker.
        """
        if self._stopping or self._task_group is None:
            raise ShuttingDownError("the worker pool is not running")
        ready = [s for s in self._seats if s.handle.state is WorkerState.READY]
        if not ready:
            raise OverCapacityError("no worker is ready (all are starting or restarting)")
        seat = min(ready, key=lambda s: (len(s.handle.streams), s.assigned))
        seat.assigned += 1
        stream = AudioStream(
            next(self._stream_ids) & 0xFFFFFFFF, seat.handle, self.settings.stream_window
        )
        seat.handle.open_stream(stream.stream_id, options or StreamOptions(), stream)
        return stream

    async def transcribe(self, audio: Audio, options: StreamOptions | None = None) -> str:
        """Decode a whole utterance and return its text."""
        return (await self.transcribe_with_times(audio, options)).text

    async def transcribe_with_times(
        self, audio: Audio, options: StreamOptions | None = None
    ) -> Transcript:
        """Decode a whole utterance: its text, and its token times where the model gives
        them (an offline BiCifParaformer)."""
        async with self.open_stream(options) as stream:
            results: list[StreamResult] = []

            async def collect() -> None:
                async for result in stream:
                    results.append(result)

            async with anyio.create_task_group() as group:
                group.start_soon(collect)
                await stream.finish(audio)
        if not results:
            return Transcript("", ())
        texts = [result.text for result in results]
        text = "".join(texts) if self.text_is_delta else texts[-1]
        return Transcript(text, results[-1].timestamps)

    # -- status ---------------------------------------------------------------------

    def status(self) -> list[WorkerStatus]:
        model = self.model.description if self.model else ""
        return [
            WorkerStatus(
                index=seat.index,
                device=seat.spec.device,
                engine=seat.spec.engine,
                model=model,
                state=seat.handle.state.value,
                pid=seat.handle.pid,
                active_streams=len(seat.handle.streams),
                free_slots=seat.handle.free_slots,
                engine_streams=seat.handle.engine_streams,
                restarts=seat.restarts,
            )
            for seat in self._seats
        ]

    @property
    def ready(self) -> bool:
        return bool(self._seats) and all(
            seat.handle.state is WorkerState.READY for seat in self._seats
        )
