"""The batch policy's hold, with a scripted command receiver (no worker process)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from multiprocessing import Pipe

import numpy as np
import pytest

from workers.ipc.launch import BatchPolicy
from workers.ipc.receiver import Command
from workers.ipc.wire import FLAG_FINAL, CommandHeader, CommandKind
from workers.worker.batching import (
    DUE_SLACK_NS,
    DUTY_TIME_CONSTANT_S,
    ChunkClock,
    Duty,
    StepTimes,
    wait_for_more,
)

CHUNK = np.zeros(9600, dtype=np.int16)  # 600 ms
CHUNK_NS = 600_000_000
MS = 1_000_000


def audio(stream_id: int, sent_ns: int, final: bool = False) -> Command:
    flags = FLAG_FINAL if final else 0
    header = CommandHeader(CommandKind.AUDIO, stream_id, flags=flags, sent_ns=sent_ns)
    return Command(header, CHUNK)


@dataclass
class ScriptedReceiver:
    """Hands out each command once its time comes, and records every wait asked of it."""

    arrivals: list[tuple[int, Command]]  # (monotonic ns, command)
    waits: list[float] = field(default_factory=list)

    def receive(self, max_items: int, timeout: float) -> tuple[list[Command], list[int]]:
        self.waits.append(timeout)
        until = time.monotonic_ns() + int(timeout * 1e9)
        due = [c for at, c in self.arrivals if at <= until][:max_items]
        if due:
            time.sleep(
                max(0, min(at for at, c in self.arrivals if c in due) - time.monotonic_ns()) / 1e9
            )
        else:
            time.sleep(timeout)
        self.arrivals = [(at, c) for at, c in self.arrivals if c not in due]
        return due, []

    def close(self) -> None:
        pass


def hold(
    receiver: ScriptedReceiver,
    commands: list[Command],
    clock: ChunkClock,
    policy: BatchPolicy,
    step_times: StepTimes | None = None,
    duty: Duty | None = None,
) -> list[Command]:
    _, results = Pipe(duplex=False)
    wait_for_more(
        receiver, results, policy, False, commands, clock, step_times or StepTimes(), duty or busy()
    )
    return commands


def busy(share: float = 1.0) -> Duty:
    duty = Duty()
    duty.share = share
    return duty


DUE = BatchPolicy(max_batch=32, deadline_s=0.3, hold="due")


def test_a_streams_next_chunk_is_due_a_chunk_after_its_last() -> None:
    clock = ChunkClock()
    clock.saw([audio(1, 1000 * MS), audio(2, 1100 * MS)])
    assert clock.next_due(1000 * MS, besides=set()) == 1000 * MS + CHUNK_NS
    assert clock.next_due(1000 * MS, besides={1}) == 1100 * MS + CHUNK_NS


def test_a_chunk_late_past_the_slack_is_not_waited_for() -> None:
    clock = ChunkClock()
    clock.saw([audio(1, 0)])
    assert clock.next_due(CHUNK_NS + DUE_SLACK_NS - 1, besides=set()) == CHUNK_NS
    assert clock.next_due(CHUNK_NS + DUE_SLACK_NS, besides=set()) is None


def test_a_final_or_a_close_ends_a_streams_dues() -> None:
    clock = ChunkClock()
    clock.saw([audio(1, 0), audio(2, 0)])
    clock.saw([audio(1, 10, final=True), Command(CommandHeader(CommandKind.CLOSE, 2))])
    assert len(clock) == 0


def test_step_times_are_scaled_from_the_nearest_row_count_known() -> None:
    times = StepTimes()
    assert times.predict(4) == 0.0
    times.record(2, 0.1)
    assert times.predict(2) == pytest.approx(0.1)
    assert times.predict(4) == pytest.approx(0.2)
    times.record(2, 0.2)  # a running estimate: the newest step counts for a part
    assert 0.1 < times.predict(2) < 0.2


def test_a_worker_with_one_stream_never_holds_its_step() -> None:
    now = time.monotonic_ns()
    clock = ChunkClock()
    clock.saw([audio(1, now - CHUNK_NS)])
    receiver = ScriptedReceiver([])
    assert len(hold(receiver, [audio(1, now)], clock, DUE)) == 1
    assert receiver.waits == []


def test_a_step_is_held_for_another_streams_chunk_that_is_due() -> None:
    now = time.monotonic_ns()
    clock = ChunkClock()
    clock.saw([audio(1, now - CHUNK_NS), audio(2, now - CHUNK_NS + 50 * MS)])
    receiver = ScriptedReceiver([(now + 50 * MS, audio(2, now + 50 * MS))])
    step = hold(receiver, [audio(1, now)], clock, DUE)
    assert [c.header.stream_id for c in step] == [1, 2]
    assert receiver.waits[0] == pytest.approx(0.05 + DUE_SLACK_NS / 1e9, abs=0.02)


def test_a_due_chunk_that_does_not_come_is_waited_for_until_its_slack_only() -> None:
    now = time.monotonic_ns()
    clock = ChunkClock()
    clock.saw([audio(1, now - CHUNK_NS), audio(2, now - CHUNK_NS + 20 * MS)])
    receiver = ScriptedReceiver([])
    started = time.monotonic()
    assert len(hold(receiver, [audio(1, now)], clock, DUE)) == 1
    assert time.monotonic() - started < 0.2
    assert len(receiver.waits) == 1


def test_the_hold_never_passes_the_deadline_less_the_steps_time() -> None:
    now = time.monotonic_ns()
    clock = ChunkClock()
    clock.saw([audio(1, now - CHUNK_NS), audio(2, now - CHUNK_NS + 500 * MS)])
    times = StepTimes()
    times.record(2, 0.1)
    receiver = ScriptedReceiver([(now + 500 * MS, audio(2, now + 500 * MS))])
    step = hold(receiver, [audio(1, now)], clock, DUE, times)
    assert len(step) == 1  # stream 2 is due after the step must start
    assert receiver.waits[0] == pytest.approx(0.3 - 0.1, abs=0.02)


def test_a_final_chunk_is_never_held() -> None:
    now = time.monotonic_ns()
    clock = ChunkClock()
    clock.saw([audio(1, now - CHUNK_NS), audio(2, now - CHUNK_NS + 10 * MS)])
    receiver = ScriptedReceiver([])
    assert len(hold(receiver, [audio(1, now, final=True)], clock, DUE)) == 1
    assert receiver.waits == []


def test_a_wait_policy_holds_for_whoever_comes_within_its_wait() -> None:
    now = time.monotonic_ns()
    receiver = ScriptedReceiver([(now + 30 * MS, audio(7, now + 30 * MS))])
    policy = BatchPolicy(max_batch=32, wait_s=0.1, deadline_s=5.0, hold="wait")
    step = hold(receiver, [audio(1, now)], ChunkClock(), policy)
    assert [c.header.stream_id for c in step] == [1, 7]


def test_an_idle_worker_does_not_hold_for_a_due_chunk() -> None:
    now = time.monotonic_ns()
    clock = ChunkClock()
    clock.saw([audio(1, now - CHUNK_NS), audio(2, now - CHUNK_NS + 50 * MS)])
    receiver = ScriptedReceiver([(now + 50 * MS, audio(2, now + 50 * MS))])
    assert len(hold(receiver, [audio(1, now)], clock, DUE, duty=busy(0.2))) == 1
    assert receiver.waits == []


def test_the_hold_grows_with_the_duty() -> None:
    now = time.monotonic()
    assert busy(0.25).hold_fraction(now) == 0.0
    assert busy(0.5).hold_fraction(now) == pytest.approx(0.5)
    assert busy(0.9).hold_fraction(now) == 1.0


def test_the_duty_is_the_share_of_wall_time_in_steps_and_decays_when_idle() -> None:
    duty = Duty()
    for step in range(200):  # 10 s of 40 ms steps every 50 ms
        duty.record(step * 0.05, step * 0.05 + 0.04)
    assert duty.share == pytest.approx(0.8, abs=0.01)
    end = 199 * 0.05 + 0.04
    assert busy(0.8).hold_fraction(end) == 1.0
    later = end + DUTY_TIME_CONSTANT_S * math.log(0.8 / 0.5)  # decayed to 0.5
    assert duty.hold_fraction(later) == pytest.approx(0.5, abs=0.01)


def test_a_policy_holds_with_due_or_a_wait_and_not_otherwise() -> None:
    assert not BatchPolicy(max_batch=8).holds  # the default: take what is waiting
    assert BatchPolicy(max_batch=8, hold="due").holds
    assert BatchPolicy(max_batch=8, wait_s=0.05).holds
