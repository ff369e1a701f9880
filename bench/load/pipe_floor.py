"""The floor under any per-chunk IPC: one 40-byte message to a sleeping process and one back.

Two processes, two ``multiprocessing`` pipes, nothing else: the parent sends 40 bytes, the
child wakes, reads, answers 40 bytes, the parent reads; then the parent sleeps a little so
that the child goes back to sleep, as it does between real chunks. Prints the CPU of each
side per round trip. Both of the pool's transports pay at least this for every chunk (one
command in; a SlotsFreed and a result out), whatever moves the audio.

    python -m bench.load.pipe_floor --round-trips 5000
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from multiprocessing.connection import Connection

from bench.common.procfs import cpu_seconds, own_cpu_seconds

MESSAGE = b"x" * 40  # the size of our command header


def _echo(commands: Connection, answers: Connection, round_trips: int) -> None:
    for _ in range(round_trips):
        commands.poll(5.0)
        commands.recv_bytes()
        answers.send_bytes(MESSAGE)


def measure(round_trips: int, pause_s: float) -> tuple[float, float]:
    """CPU µs per round trip: (parent, child). The parent's includes its ``sleep`` calls."""
    context = multiprocessing.get_context("spawn")
    commands_in, commands_out = context.Pipe(duplex=False)
    answers_in, answers_out = context.Pipe(duplex=False)
    child = context.Process(target=_echo, args=(commands_in, answers_out, round_trips))
    child.start()
    assert child.pid is not None
    time.sleep(1.0)  # past the child's start-up
    parent_before, child_before = own_cpu_seconds(), cpu_seconds(child.pid)
    for _ in range(round_trips):
        commands_out.send_bytes(MESSAGE)
        answers_in.poll(5.0)
        answers_in.recv_bytes()
        time.sleep(pause_s)
    parent = own_cpu_seconds() - parent_before
    child_cpu = cpu_seconds(child.pid) - child_before
    child.join()
    return parent / round_trips * 1e6, child_cpu / round_trips * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load.pipe_floor", description=__doc__)
    parser.add_argument("--round-trips", type=int, default=5000)
    parser.add_argument("--pause", type=float, default=0.002, help="seconds between trips")
    args = parser.parse_args(argv)
    parent, child = measure(args.round_trips, args.pause)
    print(
        f"CPU per round trip: parent {parent:.0f} µs, child {child:.0f} µs,"
        f" total {parent + child:.0f} µs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
