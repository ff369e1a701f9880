"""The worker's batch policy: how long a step is held open for more chunks.

A step takes every command already waiting (up to ``max_batch``). A step with fewer may be
held open for more, never past the moment where its oldest chunk, given the time a step of
that many rows takes (``StepTimes``), would miss ``deadline_s`` from its send, and never for
a stream's last chunk (finals go at once) unless the engine decodes at the final piece:
then finals are what a held step gathers. How long, within that:

- ``hold="due"`` (streaming pools): only while another open stream's next chunk is due
  (``ChunkClock``). A real-time client sends a chunk every chunk of audio, so each stream's
  next chunk is due one chunk's duration after its last one reached the worker. A worker
  with one stream never waits; one with many gathers those due before the deadline, in one
  model call instead of several. The deadline bounds what it costs a chunk, and the
  worker's duty scales it (``Duty``): a worker that is mostly idle answers at once, one
  that is busy (or slowed by other processes on its core) trades latency for the CPU
  that bigger steps save.
- ``hold="wait"``: up to ``wait_s`` from the step's first chunk, whoever may come (0: no
  hold). Whole-utterance engines (the offline pools, whose pieces come when utterances end)
  always hold this way.

One chunk per stream per model call is the engine's business, not this.
"""

from __future__ import annotations

import math
import time
from multiprocessing.connection import Connection

from shared.messages import SAMPLE_RATE, SlotsFreed
from workers.ipc.launch import BatchPolicy
from workers.ipc.receiver import Command, CommandReceiver
from workers.ipc.wire import CommandKind

# How late a due chunk may come and still be waited for: the gateway's and the client's
# scheduling jitter on a loaded machine.
DUE_SLACK_NS = 30_000_000
STEP_TIME_WEIGHT = 0.3  # of the newest step, in the running estimate of its row count
# A "due" hold grows with how busy the worker is (``Duty``): none below the first share of
# wall time spent in steps, the whole deadline from the second. An idle worker gains
# nothing from bigger steps, and its chunks answer at once.
HOLD_FROM_DUTY = 0.25
FULL_HOLD_AT_DUTY = 0.75
DUTY_TIME_CONSTANT_S = 2.0


class ChunkClock:
    """When each open stream's next chunk is due at the worker (monotonic ns)."""

    def __init__(self) -> None:
        self._due: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._due)

    def saw(self, commands: list[Command]) -> None:
        for command in commands:
            header = command.header
            if header.kind is CommandKind.AUDIO and command.samples is not None:
                if header.final:
                    self._due.pop(header.stream_id, None)
                else:
                    duration_ns = len(command.samples) * 1_000_000_000 // SAMPLE_RATE
                    self._due[header.stream_id] = header.sent_ns + duration_ns
            elif header.kind is CommandKind.CLOSE:
                self._due.pop(header.stream_id, None)

    def next_due(self, now_ns: int, besides: set[int]) -> int | None:
        """The earliest due time, of the streams but ``besides``, not yet past its slack."""
        due = [
            at
            for stream_id, at in self._due.items()
            if stream_id not in besides and at + DUE_SLACK_NS > now_ns
        ]
        return min(due, default=None)


class Duty:
    """The share of wall time the worker spends in steps, over the last few seconds.

    Wall time, not CPU time: a worker whose steps slow down because other processes share
    its core (a 2pass server's offline and VAD pools) counts as busier, and holds more."""

    def __init__(self) -> None:
        self.share = 0.0
        self._last_end: float | None = None

    def record(self, started: float, ended: float) -> None:
        if self._last_end is None:
            self._last_end = started
        span = ended - self._last_end
        if span > 0:
            weight = 1 - math.exp(-span / DUTY_TIME_CONSTANT_S)
            self.share += weight * ((ended - started) / span - self.share)
        self._last_end = ended

    def hold_fraction(self, now: float) -> float:
        """How much of the deadline a due hold may spend at ``now``: the share decays
        through the idle time since the last step."""
        idle = 0.0 if self._last_end is None else max(0.0, now - self._last_end)
        share = self.share * math.exp(-idle / DUTY_TIME_CONSTANT_S)
        scaled = (share - HOLD_FROM_DUTY) / (FULL_HOLD_AT_DUTY - HOLD_FROM_DUTY)
        return min(1.0, max(0.0, scaled))


class StepTimes:
    """How long a step of so many rows takes: a running estimate per row count, scaled
    from the nearest one known (linearly: a row costs less in a bigger step, so this
    overestimates upwards, and a held step starts early rather than late)."""

    def __init__(self) -> None:
        self._seconds: dict[int, float] = {}

    def record(self, rows: int, seconds: float) -> None:
        if rows <= 0:
            return
        known = self._seconds.get(rows)
        self._seconds[rows] = (
            seconds if known is None else known + STEP_TIME_WEIGHT * (seconds - known)
        )

    def predict(self, rows: int) -> float:
        if not self._seconds:
            return 0.0
        nearest = min(self._seconds, key=lambda known: (abs(known - rows), known))
        return self._seconds[nearest] * rows / nearest


def wait_for_more(
    receiver: CommandReceiver,
    results: Connection,
    policy: BatchPolicy,
    hold_finals: bool,
    commands: list[Command],
    clock: ChunkClock,
    step_times: StepTimes,
    duty: Duty,
) -> None:
    """Hold the step open for more chunks, within the policy (above)."""
    if _ends_something(commands, hold_finals):
        return
    audio = [c for c in commands if c.header.kind is CommandKind.AUDIO]
    if not audio:
        return
    # "due" is bounded by the deadline alone (as much of it as the worker's duty allows):
    # it waits only for chunks on their way. A whole-utterance engine's pieces come when
    # utterances end, never due: it holds by the wait.
    by_due = policy.hold == "due" and not hold_finals
    wait_ns = 1 << 62 if by_due else int(policy.wait_s * 1e9)
    hold_until = time.monotonic_ns() + wait_ns
    deadline_ns = int(policy.deadline_s * 1e9)
    if by_due:
        deadline_ns = int(deadline_ns * duty.hold_fraction(time.monotonic()))
    oldest_ns = min(c.header.sent_ns for c in audio)
    while len(audio) < policy.max_batch:
        now = time.monotonic_ns()
        latest_start = oldest_ns + deadline_ns - int(step_times.predict(len(audio) + 1) * 1e9)
        until = min(hold_until, latest_start)
        if by_due:
            due = clock.next_due(now, {c.header.stream_id for c in commands})
            if due is None:
                return
            until = min(until, max(due, now) + DUE_SLACK_NS)
        if until <= now:
            return
        more, freed = receiver.receive(policy.max_batch - len(audio), (until - now) / 1e9)
        if freed:
            results.send((SlotsFreed(tuple(freed)),))
        commands += more
        audio += [c for c in more if c.header.kind is CommandKind.AUDIO]
        if _ends_something(more, hold_finals):
            return


def _ends_something(commands: list[Command], hold_finals: bool) -> bool:
    """A stop, or a final chunk (unless finals are what the step gathers): the step must
    not wait. OPEN and CLOSE do not matter."""
    return any(
        c.header.kind is CommandKind.STOP
        or (not hold_finals and c.header.kind is CommandKind.AUDIO and c.header.final)
        for c in commands
    )
