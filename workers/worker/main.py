"""The worker process: load the engine once, then serve commands until told to stop.

Runs in a process started with the ``spawn`` context (fork breaks CUDA and copies the
parent's event loop). The loop drains every command already waiting, hands the slots back
at once, runs the engine on a step of them (one chunk per stream, up to ``max_batch``:
``workers.worker.steps``), and sends every message of the step in one write on the result
pipe.

An engine that raises fails what it was doing, not the worker: a step's exception fails
every stream of that step (one ``StreamFailed`` per piece, so each piece is still answered
exactly once) and drops their state; an exception opening a stream fails that stream. The
exception is an error that leaves the GPU unusable (``workers.worker.device_errors``): the
step's streams fail, and the worker says why (``WorkerQuit``) and exits, to be replaced.

The worker sees only its own GPU (``workers.ipc.devices``): its engine loads on
``cuda:0``, while everything it reports names the device it was asked for.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Iterable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import NoReturn

from shared.messages import (
    EngineSpec,
    SlotsFreed,
    StreamExpired,
    StreamFailed,
    StreamResult,
    WorkerLoadFailed,
    WorkerMessage,
    WorkerQuit,
    WorkerReady,
    WorkerStats,
    WorkerStopped,
)
from workers.engines import EngineLoader, load_engine
from workers.engines.base import ChunkItem, Engine
from workers.engines.runtime.onnx_session import use_mapped_weights
from workers.engines.runtime.placement import provider_in_use
from workers.ipc.channel import Channel, QueueChannel, ShmChannel
from workers.ipc.devices import enter_environment, local_device
from workers.ipc.launch import BatchPolicy, WorkerLaunch
from workers.ipc.os_error import describe
from workers.ipc.receiver import Command, CommandReceiver, QueueReceiver, ShmReceiver
from workers.ipc.wire import CommandKind
from workers.worker.batching import ChunkClock, Duty, StepTimes, wait_for_more
from workers.worker.device_errors import broken_device
from workers.worker.gpu_memory import GpuMemoryMeter
from workers.worker.steps import PendingCommands
from workers.worker.warm_up import warm_up

POLL_INTERVAL_S = 1.0
RECEIVE_LIMIT = 100_000  # commands per receive: in effect all that wait (slots bound audio)
# The answer to a piece taken out unread by its stream's CLOSE (steps.PendingCommands).
CLOSED_UNREAD = "the stream was closed before this piece was decoded"
EXIT_DEVICE_BROKEN = 3  # the exit code of a worker that quit on a broken GPU


class _DeviceBroken(Exception):
    """A step met an error that leaves the GPU unusable; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def worker_main(launch: WorkerLaunch, load: EngineLoader = load_engine) -> None:
    """Entry point of a spawned worker (``workers.ipc.launch.WORKER_MAIN``)."""
    enter_environment(launch.environment)  # before any library could initialise CUDA
    _leave_parents_session()
    _lower_priority(launch.nice)
    spec, results = launch.spec, launch.results
    started = time.monotonic()
    meter = GpuMemoryMeter.for_this_worker()
    try:
        engine = meter.measure_load(lambda: _load(load, spec))
    except BaseException as exc:
        _fail_to_load(results, f"{spec.engine} on {spec.device}: {_describe(exc)}")
    try:
        receiver = _receiver(launch.channel)
    except OSError as exc:  # mapping the slab needs a descriptor, and the segment
        _fail_to_load(
            results, f"{spec.engine} on {spec.device} could not map its slab: {describe(exc)}"
        )
    ready = WorkerReady(
        pid=os.getpid(),
        engine=engine.name,
        device=spec.device,
        load_seconds=time.monotonic() - started,
        capabilities=engine.capabilities,
        provider=provider_in_use(),
        gpu_memory_bytes=meter.at_load,
    )
    try:
        results.send((ready,))
        _serve(engine, receiver, results, launch.policy, spec.stream_idle_timeout_s, meter)
    except _DeviceBroken as exc:
        quit_reason = f"{engine.name} on {spec.device}: {exc.reason}; exiting to be replaced"
        results.send((WorkerQuit(quit_reason),))
        raise SystemExit(EXIT_DEVICE_BROKEN) from None
    except (EOFError, BrokenPipeError):
        # The parent is gone (its end of a pipe closed): nobody is left to serve or tell.
        raise SystemExit(1) from None
    finally:
        receiver.close()
        results.close()


def _load(load: EngineLoader, spec: EngineSpec) -> Engine:
    """The engine, loaded on the device this process sees; a GPU's warmed up."""
    device = local_device(spec.device)
    use_mapped_weights(spec.mapped_weights)
    engine = load(replace(spec, device=device))
    if device != "cpu":
        warm_up(engine)
    return engine


def _receiver(channel: Channel) -> CommandReceiver:
    match channel:
        case ShmChannel(commands=commands, slab_name=slab_name, layout=layout):
            return ShmReceiver(commands, slab_name, layout)
        case QueueChannel(commands=queue):
            return QueueReceiver(queue)


def _fail_to_load(results: Connection, error: str) -> NoReturn:
    """Tell the parent why this worker cannot serve (its start fails with that), and exit."""
    results.send((WorkerLoadFailed(error),))
    results.close()
    raise SystemExit(1) from None


def _serve(
    engine: Engine,
    receiver: CommandReceiver,
    results: Connection,
    policy: BatchPolicy,
    idle_timeout_s: float,
    meter: GpuMemoryMeter,
) -> None:
    """Serve commands until told to stop. Raises :class:`_DeviceBroken` (the step's
    answers sent first) where a step broke the GPU."""
    hold_finals = engine.capabilities.decodes_at_final
    # A whole-utterance engine only buffers the pieces before a final, and a re-decoding
    # one decodes a stream once at its last waiting piece: both take every waiting piece.
    takes_all = hold_finals or engine.capabilities.regions
    pending = PendingCommands(one_chunk_per_stream=not takes_all)
    next_idle_check = time.monotonic() + POLL_INTERVAL_S
    clock, step_times, duty = ChunkClock(), StepTimes(), Duty()
    while True:
        # Everything waiting (the slots bound it): a step is composed from all of it.
        received, freed = receiver.receive(RECEIVE_LIMIT, 0.0 if pending else POLL_INTERVAL_S)
        outbox: list[WorkerMessage] = []
        if freed:
            # Hand the slots back before computing: the parent can refill them meanwhile.
            results.send((SlotsFreed(tuple(freed)),))
        if policy.holds and not pending:
            # With a backlog the step is full of known work already: no waiting for more.
            wait_for_more(receiver, results, policy, hold_finals, received, clock, step_times, duty)
        if policy.hold == "due":
            clock.saw(received)
        outbox += [StreamFailed(stream_id, CLOSED_UNREAD) for stream_id in pending.extend(received)]
        commands = pending.take_step(policy.max_batch)
        started = time.monotonic()
        try:
            stopping = _apply(engine, commands, outbox)
        except _DeviceBroken:
            results.send(tuple(outbox))  # the failed step's answers, then the quit
            raise
        rows = sum(c.header.kind is CommandKind.AUDIO for c in commands)
        if rows:
            ended = time.monotonic()
            step_times.record(rows, ended - started)
            duty.record(started, ended)
        now = time.monotonic()
        if now >= next_idle_check:
            next_idle_check = now + POLL_INTERVAL_S
            for stream_id in engine.expire_idle(now, idle_timeout_s):
                message = f"stream idle for more than {idle_timeout_s:g} s; its state was dropped"
                outbox.append(StreamExpired(stream_id, message))
            outbox.append(WorkerStats(engine.active_streams, meter.now()))
        if stopping:
            outbox.append(WorkerStopped(engine.active_streams))
        if outbox:
            results.send(tuple(outbox))
        if stopping:
            return


def _apply(engine: Engine, commands: list[Command], outbox: list[WorkerMessage]) -> bool:
    """Apply commands in order; audio is batched until a command that must see it done."""
    batch: list[tuple[ChunkItem, int]] = []
    stopping = False
    for command in commands:
        header = command.header
        match header.kind:
            case CommandKind.OPEN:
                assert header.options is not None
                try:
                    engine.open_stream(header.stream_id, header.options)
                except Exception as exc:
                    _drop_streams(engine, (header.stream_id,))
                    # Not an answer to a piece (none was sent yet): the stream is failed
                    # the way an expired one is; its pieces, if any come, find no state.
                    reason = f"{engine.name} failed to open the stream: {_describe(exc)}"
                    outbox.append(StreamExpired(header.stream_id, reason))
            case CommandKind.AUDIO:
                assert command.samples is not None
                item = ChunkItem(header.stream_id, header.seq, command.samples, header.final)
                batch.append((item, header.sent_ns))
            case CommandKind.CLOSE:
                _run_batch(engine, batch, outbox)
                # An abandoned stream: nobody waits for an answer, even if dropping fails.
                _drop_streams(engine, (header.stream_id,))
            case CommandKind.STOP:
                stopping = True
    _run_batch(engine, batch, outbox)
    return stopping


def _run_batch(
    engine: Engine, batch: list[tuple[ChunkItem, int]], outbox: list[WorkerMessage]
) -> None:
    if not batch:
        return
    started_ns = time.monotonic_ns()
    items = [item for item, _ in batch]
    try:
        outputs = engine.feed(items)
        if len(outputs) != len(items):
            raise RuntimeError(f"{len(outputs)} outputs for {len(items)} chunks")
    except Exception as exc:
        reason = f"{engine.name} failed on this step: {_describe(exc)}"
        outbox.extend(StreamFailed(item.stream_id, reason) for item in items)
        # Their state may be half-updated: drop it, so that later audio for them fails
        # cleanly (an unknown stream) instead of decoding on top of it.
        _drop_streams(engine, dict.fromkeys(item.stream_id for item in items))
        batch.clear()
        broken = broken_device(exc)
        if broken is not None:
            raise _DeviceBroken(broken) from exc
        return
    compute_ms = (time.monotonic_ns() - started_ns) / 1e6
    for (_, sent_ns), output in zip(batch, outputs, strict=True):
        if output.error is not None:
            outbox.append(StreamFailed(output.stream_id, output.error))
            continue
        queue_ms = (started_ns - sent_ns) / 1e6
        outbox.append(
            StreamResult(
                output.stream_id,
                output.seq,
                output.decoded,  # whole, as the engine said it
                output.final,
                queue_ms=queue_ms,
                compute_ms=compute_ms,
                batch_size=len(batch),
            )
        )
    batch.clear()


def _drop_streams(engine: Engine, stream_ids: Iterable[int]) -> None:
    for stream_id in stream_ids:
        try:
            engine.close_stream(stream_id)
        except Exception:
            pass  # the stream is failed or abandoned already; its state is the engine's


def _leave_parents_session() -> None:
    """Take this worker out of the parent's session, and so out of its process group.

    A signal for the server's whole group (Ctrl-C in its terminal; SIGTERM to the group,
    as ``kill -- -PID`` or a container runtime's process-group kill sends) must not reach
    the workers: they would die under
    the sessions the drain lets finish. The parent stops them in order instead, and a
    worker whose parent is gone still exits (its command pipe reads EOF, its results pipe
    breaks). SIGTERM keeps its default action, so that the parent's ``terminate()`` ends a
    stuck worker. SIGINT stays ignored, whoever sends it: the parent stops its workers.
    (systemd's default KillMode signals every process of the unit's cgroup, whatever its
    group: hence ``KillMode=mixed`` in deploy/asr-gateway.service.)
    """
    try:
        os.setsid()
    except PermissionError:  # already a process group leader: started on its own
        pass
    signal.signal(signal.SIGINT, signal.SIG_IGN)


AUTOGROUP = Path("/proc/self/autogroup")


def _lower_priority(nice: int) -> None:
    """Run ``nice`` lower than the gateway and the other pools' workers.

    The worker leads a session of its own (above), and with the kernel's autogroups
    (``kernel.sched_autogroup_enabled``, on in most distributions) the scheduler shares the
    CPU between sessions first: a process's own nice value then only ranks it within its
    session (sched(7), "The autogroup feature"). So the session's nice value is lowered
    too; any process may lower its own.
    """
    if nice <= 0:
        return
    os.nice(nice)
    try:
        AUTOGROUP.write_text(str(nice))
    except OSError:
        pass  # no autogroups here (or not allowed): the process's own nice value does it


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
