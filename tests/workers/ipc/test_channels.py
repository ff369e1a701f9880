"""Both command transports carry an OPEN's hotwords to the worker's end, in order."""

from __future__ import annotations

import multiprocessing
from multiprocessing.queues import Queue

import numpy as np

from shared.messages import MAX_HOTWORD_CHARS, StreamOptions
from workers.ipc.channel import QueueItem
from workers.ipc.receiver import Command, CommandReceiver, QueueReceiver, ShmReceiver
from workers.ipc.sender import CommandSender, QueueSender, ShmSender, audio_header, open_header
from workers.ipc.slab import Slab
from workers.ipc.wire import CommandKind, SlabLayout

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
