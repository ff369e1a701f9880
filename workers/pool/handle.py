"""The parent's handle on one spawned worker process: channels, slots, life cycle."""

from __future__ import annotations

import enum
import errno
import math
import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Protocol

import anyio

from shared.errors import GatewayError, WorkerError, WorkerLoadError
from shared.messages import (
    EngineSpec,
    StreamExpired,
    StreamFailed,
    StreamOptions,
    StreamResult,
    WorkerLoadFailed,
    WorkerMessage,
    WorkerQuit,
    WorkerReady,
    WorkerStats,
)
from shared.settings import PoolSettings
from workers.engines import EngineLoader, load_engine
from workers.ipc.channel import Channel, QueueChannel, ShmChannel
from workers.ipc.devices import worker_environment
from workers.ipc.framing import FramingError
from workers.ipc.launch import WORKER_MAIN, BatchPolicy, WorkerLaunch, run_entry_point
from workers.ipc.os_error import describe
from workers.ipc.results import ResultReader, unpickle_batch
from workers.ipc.sender import CommandSender, QueueSender, ShmSender, open_header
from workers.ipc.slab import Slab, SlabError
from workers.ipc.wire import CommandHeader, CommandKind, SlabLayout
from workers.pool.owed import OwedWork

KILL_GRACE_S = 2.0


class WorkerState(enum.StrEnum):
    """``DEAD`` from the moment the worker cannot serve: its results pipe read EOF or
    something unreadable, or it was killed. Streams are bound only to ``READY`` workers."""

    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    DEAD = "dead"


class StreamSink(Protocol):
    """Where the pool routes a stream's results: the parent's side of an open stream."""

    def deliver(self, message: WorkerMessage) -> None: ...

    def fail(self, error: GatewayError) -> None: ...


class WorkerHandle:
    """One worker process. Create, ``await start()``, serve, ``close()``.

    The handle owns the parent's ends of the pipes and the slab; ``close()`` releases them
    all and is safe to call twice. Streams bound to it live in ``streams``.
    """

    def __init__(
        self,
        index: int,
        spec: EngineSpec,
        settings: PoolSettings,
        engine_loader: EngineLoader = load_engine,
        *,
        nice: int = 0,
    ) -> None:
        self.index = index
        self.spec = spec
        self.nice = nice  # how much lower than the gateway it runs (Unix nice)
        self._engine_loader = engine_loader
        self.state = WorkerState.STARTING
        self.streams: dict[int, StreamSink] = {}
        self.ready: WorkerReady | None = None
        self._settings = settings
        self._layout = SlabLayout(settings.slot_bytes, settings.slots_per_worker)
        self._free_slots_in, self._free_slots = anyio.create_memory_object_stream[int](
            max_buffer_size=settings.slots_per_worker
        )
        for slot in range(settings.slots_per_worker):
            self._free_slots_in.send_nowait(slot)
        self._slab: Slab | None = None
        self._sender: CommandSender | None = None
        self._reader: ResultReader | None = None
        self._early: list[bytes] = []  # read with the first message, routed after it
        self._process: BaseProcess | None = None
        self.owed = OwedWork()  # for the pool's hang watchdog
        self.engine_streams = 0  # decoder states the worker holds, from its WorkerStats
        self.gpu_memory_bytes: int | None = None  # its own figure (WorkerReady, WorkerStats)
        self.quit_reason: str | None = None  # why it exited to be replaced (WorkerQuit)
        self._commands_waiting = anyio.Event()  # set while the sender holds unsent bytes

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def slot_bytes(self) -> int:
        return self._layout.slot_bytes

    @property
    def free_slots(self) -> int:
        return self._free_slots.statistics().current_buffer_used

    async def start(self) -> WorkerReady:
        """Spawn the worker and wait until it has loaded its engine.

        Raises :class:`WorkerLoadError` with the worker's own error when it cannot load, or
        with what the parent could not make for it (a pipe, its slab, the process: no
        descriptor free, no room in /dev/shm). ``close()`` releases what was made.
        """
        try:
            environment = worker_environment(self.spec.device)
        except ValueError as exc:
            raise WorkerLoadError(f"worker {self.index} cannot start: {exc}") from None
        context = multiprocessing.get_context("spawn")
        child_ends: list[Connection] = []
        doing = "opening its results pipe"
        try:
            results, results_child = context.Pipe(duplex=False)
            child_ends.append(results_child)
            self._reader = ResultReader(results)
            channel: Channel
            if self._settings.transport == "shm":
                doing = "creating its slab"
                self._slab = Slab(self._layout)
                doing = "opening its command pipe"
                commands_child, commands = context.Pipe(duplex=False)
                child_ends.append(commands_child)
                self._sender = ShmSender(commands, self._slab)
                channel = ShmChannel(commands_child, self._slab.name, self._layout)
            else:
                doing = "opening its command queue"
                queue = context.Queue()
                channel = QueueChannel(queue)
                self._sender = QueueSender(queue)
            policy = BatchPolicy(
                self._settings.max_batch,
                self._settings.batch_wait_s,
                self._settings.chunk_deadline_s,
                self._settings.batch_hold,
            )
            launch = WorkerLaunch(
                self.spec,
                channel,
                results_child,
                policy,
                self.nice,
                environment,
            )
            doing = "spawning its process"
            self._process = context.Process(
                target=run_entry_point,
                args=(WORKER_MAIN, launch, self._engine_loader),
                name=f"asr-worker-{self.index}",
                daemon=True,
            )
            self._process.start()
        except (OSError, SlabError) as exc:
            failure: WorkerLoadError | None = self._could_not_start(doing, exc)
        else:
            failure = None
        finally:
            # The child has its own copies; ours must go so that its death reads as EOF.
            for end in child_ends:
                end.close()
        if failure is not None:
            # Raised here, not in the handler: the OSError's frames, and any descriptor a
            # half-made spawn holds in them, are released with it.
            raise failure
        try:
            with anyio.fail_after(self._settings.start_timeout_s):
                first = await self._receive_one()
        except TimeoutError:
            raise WorkerLoadError(
                f"worker {self.index} ({self.spec.device}) did not load its model within"
                f" {self._settings.start_timeout_s:g} s (ASR_WORKER_START_TIMEOUT)"
            ) from None
        match first:
            case WorkerReady():
                self.ready = first
                self.gpu_memory_bytes = first.gpu_memory_bytes
                self.owed.whole_utterances = first.capabilities.decodes_at_final
                stop_asked = self.state is WorkerState.STOPPING  # while it loaded
                self.state = WorkerState.READY
                if stop_asked:
                    self.request_stop()  # now that it reads commands; else only the kill
                return first
            case WorkerLoadFailed():
                raise WorkerLoadError(f"worker {self.index} failed to load: {first.error}")
            case None:
                raise WorkerLoadError(
                    f"worker {self.index} ({self.spec.device}) exited while loading"
                    f" (exit code {await self.reap()})"
                )
            case _:
                raise WorkerLoadError(f"worker {self.index} sent {first!r} before ready")

    def _could_not_start(self, doing: str, exc: OSError | SlabError) -> WorkerLoadError:
        what = f"worker {self.index} ({self.spec.device}) could not start"
        if isinstance(exc, SlabError):
            layout = self._layout
            size = (
                f" (ASR_SLOTS_PER_WORKER {layout.slot_count} x ASR_SLOT_BYTES {layout.slot_bytes})"
                if exc.errno == errno.ENOSPC
                else ""
            )
            return WorkerLoadError(f"{what}: {exc}{size}")
        return WorkerLoadError(f"{what}, {doing}: {describe(exc)}")

    async def _receive_one(self) -> WorkerMessage | None:
        """The worker's first message (its ready or its load failure), ``None`` at EOF."""
        reader = self._reader
        assert reader is not None
        while True:
            await anyio.wait_readable(reader.fileno())
            try:
                payloads, ended = reader.read()
                if payloads:
                    # Messages after the first wait in the pipe's order for read_messages:
                    # a worker sends nothing else before the gateway answers its ready.
                    self._early = payloads[1:]
                    return unpickle_batch(payloads[0])[0]
            except Exception as exc:  # an OSError, bad framing, or anything unpickling raised
                raise WorkerLoadError(
                    f"worker {self.index} sent a first message that cannot be read"
                    f" ({type(exc).__name__}: {exc})"
                ) from exc
            if ended:
                return None

    async def read_messages(self, route: Callable[[WorkerHandle, WorkerMessage], None]) -> None:
        """Route every message until the worker's end of the pipe closes (it exited).

        The worker is ``DEAD`` from the moment that is read, before this returns; messages
        it sent before closing are routed first. A read that would block is no death, under
        any event loop: a message arrives whole, whatever its size, or waits for the rest.
        A read that fails (the descriptor closed under us) ends it as EOF does. A batch that
        cannot be read (bad framing, unpickling fails) also leaves it ``DEAD``, and raises
        :class:`WorkerError`; so does anything ``route`` raises, which propagates.
        """
        reader = self._reader
        assert reader is not None
        payloads, self._early = self._early, []
        ended = False
        while True:
            for payload in payloads:
                try:
                    batch = unpickle_batch(payload)
                except Exception as exc:  # pickle raises anything a reduce function raises
                    self.state = WorkerState.DEAD
                    raise WorkerError(
                        f"sent a message that cannot be read ({type(exc).__name__}: {exc})"
                    ) from exc
                self._route_batch(batch, route)
            if ended:
                self.state = WorkerState.DEAD
                return
            try:
                await anyio.wait_readable(reader.fileno())
                payloads, ended = reader.read()
            except FramingError as exc:
                self.state = WorkerState.DEAD
                raise WorkerError(f"sent bytes that are not a message ({exc})") from exc
            except OSError:
                payloads, ended = [], True

    def _route_batch(
        self,
        batch: tuple[WorkerMessage, ...],
        route: Callable[[WorkerHandle, WorkerMessage], None],
    ) -> None:
        answered = False
        try:
            for message in batch:
                match message:
                    case StreamResult() | StreamFailed():
                        answered = True
                        self.owed.answered()
                        if not isinstance(message, StreamResult):
                            self.owed.forget(message.stream_id)
                    case StreamExpired():
                        self.owed.forget(message.stream_id)
                    case WorkerStats():
                        self.engine_streams = message.engine_streams
                        self.gpu_memory_bytes = message.gpu_memory_bytes
                    case WorkerQuit():
                        self.quit_reason = message.reason
                route(self, message)
        except BaseException:
            self.state = WorkerState.DEAD  # the rest of the batch is lost
            raise
        if answered:
            self.owed.progressed()

    async def flush_commands(self) -> None:
        """Write out what the command pipe could not take at once, as it drains. Runs for
        the worker's life beside ``read_messages``."""
        while True:
            await self._commands_waiting.wait()
            sender = self._sender
            while sender is not None and sender.pending_bytes:
                await anyio.wait_writable(sender.fileno())
                sender.flush()
            self._commands_waiting = anyio.Event()

    async def acquire_slot(self) -> int:
        """Wait for a free slot: this wait is the pipeline's backpressure."""
        try:
            return await self._free_slots.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise WorkerError(f"worker {self.index} is gone") from None

    def release_slots(self, slots: tuple[int, ...]) -> None:
        for slot in slots:
            self._free_slots_in.send_nowait(slot)

    def open_stream(self, stream_id: int, options: StreamOptions, sink: StreamSink) -> None:
        self.streams[stream_id] = sink
        self.send(open_header(stream_id, options))

    def close_stream(self, stream_id: int) -> None:
        """Tell the worker to drop an abandoned stream's state; a gone worker has none."""
        self.streams.pop(stream_id, None)
        self.owed.forget(stream_id)
        if self.state is WorkerState.READY:
            try:
                self.send(CommandHeader(CommandKind.CLOSE, stream_id))
            except WorkerError:
                pass

    def send(self, header: CommandHeader, pcm: bytes | memoryview = b"") -> None:
        if self.state is not WorkerState.READY or self._sender is None:
            raise WorkerError(f"worker {self.index} is {self.state.value}")
        try:
            self._sender.send(header, pcm)
        except (OSError, ValueError) as exc:
            raise WorkerError(f"worker {self.index} is gone: {exc}") from exc
        if self._sender.pending_bytes:
            self._commands_waiting.set()
        if header.kind is CommandKind.AUDIO:
            self.owed.sent(header.stream_id, header.length, header.final)

    def request_stop(self) -> None:
        """Ask the worker to finish what is queued and exit."""
        if self.state is WorkerState.READY and self._sender is not None:
            try:
                self._sender.send(CommandHeader(CommandKind.STOP, 0))
            except (OSError, ValueError):
                pass
            if self._sender.pending_bytes:
                self._commands_waiting.set()
        if self.state is not WorkerState.DEAD:
            self.state = WorkerState.STOPPING

    def kill(self) -> None:
        """SIGKILL the worker (if it runs); it is ``DEAD`` from now on."""
        self.state = WorkerState.DEAD
        if self._process is not None and self._process.is_alive():
            self._process.kill()

    async def wait_exited(self) -> int | None:
        """Wait for the process to exit, reap it, and return its exit code."""
        process = self._process
        assert process is not None
        await _exited(process, math.inf)
        return process.exitcode

    async def reap(self, timeout: float = KILL_GRACE_S) -> int | None:
        """Wait for the process to exit; past ``timeout`` terminate it, and past
        ``KILL_GRACE_S`` more kill it; join it."""
        process = self._process
        if process is None or process.pid is None:
            return None  # never started
        if process.exitcode is None and not await _exited(process, timeout):
            process.terminate()
            if not await _exited(process, KILL_GRACE_S):
                process.kill()  # a stopped process takes no SIGTERM
                await _exited(process, KILL_GRACE_S)
        return process.exitcode

    def fail_streams(self, error: GatewayError) -> None:
        streams, self.streams = self.streams, {}
        self.owed.forget_all()
        for sink in streams.values():
            sink.fail(error)

    def close(self) -> None:
        """Release the pipes, the slot pool and the slab. Safe to call twice."""
        self.state = WorkerState.DEAD
        self._free_slots_in.close()
        self._free_slots.close()
        if self._sender is not None:
            if self._sender.pending_bytes:
                anyio.notify_closing(self._sender.fileno())
            self._sender.close()
            self._sender = None
        if self._reader is not None:
            if not self._reader.closed:  # it may have been closed under us
                anyio.notify_closing(self._reader.fileno())
            self._reader.close()
            self._reader = None
        if self._slab is not None:
            self._slab.close()
            self._slab = None
        if self._process is not None and self._process.exitcode is not None:
            self._process.close()
            self._process = None


async def _exited(process: BaseProcess, timeout: float) -> bool:
    """Wait up to ``timeout`` for the process to exit, and reap it."""
    with anyio.move_on_after(timeout):
        await anyio.wait_readable(process.sentinel)
        # The sentinel reads EOF as the child's files close, a moment before the kernel
        # lets it be reaped: this blocking join lasts only that moment.
        process.join()
        return True
    return False
