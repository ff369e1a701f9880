"""Which of the commands a worker has received go into its next engine step (sans-I/O).

A stream's chunks depend on each other (each decodes on the state the one before left), so
two chunks of one stream can never share a model call: an engine runs them in successive
calls ("rounds"). A step that took commands in arrival order, up to ``max_batch``, was
therefore often a few streams' many chunks: a client sending faster than real time has a
dozen chunks queued, and a step of 32 commands from 3 such streams ran as 11 model calls of
2-3 rows. Measured on the large int8 model under ``bench.load.ws_load --fast``: 172 of 257 model
calls had one row, at 57 ms a row against 28 ms in calls of 5-8, and every other stream of
that worker waited behind all of them.

So a step takes, for each stream, its commands up to and including its first chunk; the
rest wait, in order, for the next step. Each step then advances every waiting stream by one
chunk, in one model call of as many rows as there are streams (up to ``max_batch`` chunks),
and a stream that arrives behind a fast one waits one step, not the fast one's backlog.

A CLOSE takes its stream's audio out of what waits (the client has gone, or the session
moved on): a file's VAD pass or a fast client's backlog may be dozens of pieces queued
here, seconds of work for nobody. Each piece taken out is answered with ``StreamFailed``,
which nobody reads, so that the parent's count of the answers owed stays whole.

Whole-utterance engines (``decodes_at_final``) take every waiting piece at once instead:
their pieces before the final are only buffered, and a step per piece would cost a step's
overhead each. So do re-decoding engines (``regions``: streaming SenseVoice), which decode
a stream once at its last piece in the step: a step per piece would decode every piece of a
backlog, each a whole window, and the stream would fall further behind. Order is kept
within each stream (its OPEN, its chunks, its CLOSE); across
streams it does not matter. A STOP goes into a step only once nothing received before it
is still waiting.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from workers.ipc.receiver import Command
from workers.ipc.wire import CommandKind


class PendingCommands:
    """Commands received and not yet in a step, in arrival order."""

    def __init__(self, one_chunk_per_stream: bool) -> None:
        self._one_chunk_per_stream = one_chunk_per_stream
        self._waiting: deque[Command] = deque()

    def __len__(self) -> int:
        return len(self._waiting)

    def extend(self, commands: Iterable[Command]) -> list[int]:
        """Wait ``commands`` after those already waiting; a CLOSE takes out its stream's
        audio still waiting, which nobody will read. Returns the stream of each piece taken
        out, in order: each is owed an answer all the same (the parent counts them)."""
        abandoned: list[int] = []
        for command in commands:
            header = command.header
            if header.kind is CommandKind.CLOSE:
                stream_id = header.stream_id
                if any(_audio_of(waiting, stream_id) for waiting in self._waiting):
                    kept = deque(w for w in self._waiting if not _audio_of(w, stream_id))
                    abandoned += [stream_id] * (len(self._waiting) - len(kept))
                    self._waiting = kept
            self._waiting.append(command)
        return abandoned

    def take_step(self, max_batch: int) -> list[Command]:
        """The next step's commands, in arrival order; at most ``max_batch`` chunks."""
        step: list[Command] = []
        kept: deque[Command] = deque()
        held: set[int] = set()  # streams whose later commands wait for the next step
        chunks = 0
        while self._waiting:
            command = self._waiting.popleft()
            header = command.header
            if header.kind is CommandKind.STOP:
                if kept:
                    kept.append(command)
                    kept.extend(self._waiting)
                    self._waiting.clear()
                    break
                step.append(command)
                continue
            if header.stream_id in held:
                kept.append(command)
                continue
            if header.kind is CommandKind.AUDIO:
                if chunks == max_batch:
                    held.add(header.stream_id)
                    kept.append(command)
                    continue
                chunks += 1
                if self._one_chunk_per_stream:
                    held.add(header.stream_id)
            step.append(command)
        self._waiting = kept
        return step


def _audio_of(command: Command, stream_id: int) -> bool:
    return command.header.kind is CommandKind.AUDIO and command.header.stream_id == stream_id
