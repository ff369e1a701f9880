"""Both command transports carry an OPEN's hotwords to the worker's end, in order."""

from __future__ import annotations

import multiprocessing
import select
import threading
from multiprocessing.queues import Queue

import numpy as np

from shared.messages import MAX_HOTWORD_CHARS, MAX_SPEECH_REGIONS, StreamOptions
from workers.ipc.channel import QueueItem
from workers.ipc.receiver import Command, CommandReceiver, QueueReceiver, ShmReceiver
from workers.ipc.sender import CommandSender, QueueSender, ShmSender, audio_header, open_header
from workers.ipc.slab import Slab
from workers.ipc.wire import CommandHeader, CommandKind, SlabLayout

LAYOUT = SlabLayout(slot_bytes=64, slot_count=2)
# Near the largest set allowed (16 KiB): far past the 4 KiB a pipe writes atomically.
BIG = ("话" * MAX_HOTWORD_CHARS,) * 168
OPTIONS = [
    StreamOptions(hotwords=("阿里巴巴", "Zürich")),
    StreamOptions(),
    StreamOptions(hotwords=BIG),
]


def _exchange(sender: CommandSender, receiver: CommandReceiver) -> list[Command]:
    samples = np.arange(8, dtype=np.int16)
    for stream_id, options in enumerate(OPTIONS):
        sender.send(open_header(stream_id, options))
        sender.send(
            audio_header(stream_id, 0, stream_id % 2, samples.nbytes, True), samples.tobytes()
        )
    received: list[Command] = []
    while len(received) < 2 * len(OPTIONS):
        commands, _ = receiver.receive(max_items=16, timeout=5.0)
        assert commands, "the commands did not arrive"
        received += commands
    return received


def _check(received: list[Command]) -> None:
    kinds = [c.header.kind for c in received]
    assert kinds == [CommandKind.OPEN, CommandKind.AUDIO] * len(OPTIONS)
    assert [c.header.options for c in received[::2]] == OPTIONS
    for command in received[1::2]:
        assert command.samples is not None
        np.testing.assert_array_equal(command.samples, np.arange(8, dtype=np.int16))


def test_the_shm_transport_carries_hotwords() -> None:
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    with Slab(LAYOUT) as slab:
        sender = ShmSender(sending, slab)
        receiver = ShmReceiver(receiving, slab.name, LAYOUT)
        try:
            _check(_exchange(sender, receiver))
            assert sender.pending_bytes == 0
        finally:
            receiver.close()
            sender.close()


def test_the_queue_transport_carries_hotwords() -> None:
    queue: Queue[QueueItem] = multiprocessing.get_context("spawn").Queue()
    sender = QueueSender(queue)
    try:
        _check(_exchange(sender, QueueReceiver(queue)))
    finally:
        sender.close()


def test_a_command_larger_than_the_pipe_waits_in_the_sender_and_arrives_whole() -> None:
    # The most speech regions a speaker stream may carry: an OPEN of about 147 KiB, more
    # than the 64 KiB a pipe holds; written non-blocking, the rest waits for ``flush``.
    regions = tuple((2 * k, 2 * k + 1) for k in range(MAX_SPEECH_REGIONS))
    options = StreamOptions(speech_regions=regions)
    context = multiprocessing.get_context("spawn")
    receiving, sending = context.Pipe(duplex=False)
    received: list[bytes] = []
    with Slab(LAYOUT) as slab:
        sender = ShmSender(sending, slab)
        try:
            sender.send(open_header(7, options))
            sender.send(open_header(8, StreamOptions()))  # behind it, in order
            assert sender.pending_bytes > 0
            reader = threading.Thread(
                target=lambda: received.extend(receiving.recv_bytes() for _ in range(2))
            )
            reader.start()
            while sender.pending_bytes:
                select.select([], [sender.fileno()], [], 5.0)
                sender.flush()
            reader.join(5.0)
        finally:
            receiving.close()
            sender.close()
    first, second = (CommandHeader.unpack(frame) for frame in received)
    assert (first.stream_id, first.options) == (7, options)
    assert (second.stream_id, second.options) == (8, StreamOptions())
