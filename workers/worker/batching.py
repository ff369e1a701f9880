"""The worker's batch policy: how long a step is held open for more chunks.

A step takes every command already waiting (up to ``max_batch``); with a wait set, a step
with fewer is held open for more, within ``workers.ipc.launch.BatchPolicy``'s wait and
deadline. One chunk per stream per model call is the engine's business, not this.
"""

from __future__ import annotations

import time
from multiprocessing.connection import Connection

from shared.messages import SlotsFreed
from workers.ipc.launch import BatchPolicy
from workers.ipc.receiver import Command, CommandReceiver
from workers.ipc.wire import CommandKind


def wait_for_more(
    receiver: CommandReceiver,
    results: Connection,
    policy: BatchPolicy,
    hold_finals: bool,
    commands: list[Command],
    step_s: float,
) -> None:
    """Hold the step open for more chunks, within the policy's wait and deadline."""
    audio = [c for c in commands if c.header.kind is CommandKind.AUDIO]
    if not audio or _ends_something(commands, hold_finals):
        return
    hold_until = time.monotonic_ns() + int(policy.wait_s * 1e9)
    oldest_ns = min(c.header.sent_ns for c in audio)
    latest_start = oldest_ns + int((policy.deadline_s - step_s) * 1e9)
    while len(commands) < policy.max_batch:
        wait_ns = min(hold_until, latest_start) - time.monotonic_ns()
        if wait_ns <= 0:
            return
        more, freed = receiver.receive(policy.max_batch - len(commands), wait_ns / 1e9)
        if freed:
            results.send((SlotsFreed(tuple(freed)),))
        commands += more
        if not more or _ends_something(more, hold_finals):
            return


def _ends_something(commands: list[Command], hold_finals: bool) -> bool:
    """A stop, or a final chunk (unless finals are what the step gathers): the step must
    not wait. OPEN and CLOSE do not matter."""
    return any(
        c.header.kind is CommandKind.STOP
        or (not hold_finals and c.header.kind is CommandKind.AUDIO and c.header.final)
        for c in commands
    )
