"""An open stream, as the pool's user sees it: send audio, read results, finish, close."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from types import TracebackType

import anyio
import numpy as np

from shared.audio import Samples
from shared.errors import GatewayError, StreamClosedError, WorkerError
from shared.messages import (
    NOTHING,
    Decoded,
    StreamExpired,
    StreamFailed,
    StreamResult,
    WorkerMessage,
)
from workers.ipc.sender import audio_header
from workers.ipc.wire import NO_SLOT
from workers.pool.handle import WorkerHandle

# How long a send to a dead worker waits for its supervisor to say why (the reap of a
# killed process takes milliseconds; one whose pipe closed but lives, a grace to terminate).
LOST_CAUSE_WAIT_S = 5.0

Audio = bytes | bytearray | memoryview | Samples


def pcm_bytes(audio: Audio) -> memoryview:
    """Little-endian int16 bytes of ``audio`` (an int16 array or raw PCM bytes)."""
    if isinstance(audio, np.ndarray):
        if audio.dtype != np.int16:
            raise TypeError(f"audio arrays must be int16, not {audio.dtype}")
        return memoryview(audio.astype("<i2", copy=False).tobytes())
    view = memoryview(audio).cast("B")
    if len(view) % 2:
        raise ValueError("PCM must be whole 16-bit samples (an even number of bytes)")
    return view


class AudioStream:
    """One utterance bound to one worker for its whole life.

    ``send`` waits when the worker has no free slot, or when ``window`` results are waiting
    unread: read results concurrently with sending (another task, or ``transcribe``). The
    iteration ends after the final result; a worker failure raises :class:`WorkerError`.
    """

    def __init__(self, stream_id: int, handle: WorkerHandle, window: int) -> None:
        self.stream_id = stream_id
        self.worker_index = handle.index
        self._handle = handle
        self._seq = 0
        self._finished = False
        self._done = False
        self._failed: GatewayError | None = None
        self._failed_event = anyio.Event()
        self._send_lock = anyio.Lock()
        # One window permit per piece sent, returned when its result is read: so the
        # results buffer below can never overflow (+1 for the failure, if any).
        self._window = anyio.Semaphore(window)
        self._results_in, self._results = anyio.create_memory_object_stream[
            StreamResult | GatewayError
        ](max_buffer_size=window + 1)

    async def send(self, audio: Audio) -> None:
        """Queue audio for the worker; split into slot-sized pieces as needed."""
        data = pcm_bytes(audio)
        async with self._send_lock:
            self._check_can_send()
            step = self._handle.slot_bytes
            for start in range(0, len(data), step):
                await self._send_piece(data[start : start + step], final=False)

    async def finish(self, audio: Audio = b"") -> None:
        """Send the last audio (may be empty) and ask for the final result."""
        data = pcm_bytes(audio)
        async with self._send_lock:
            self._check_can_send()
            self._finished = True
            step = self._handle.slot_bytes
            starts = list(range(0, len(data), step)) or [0]
            for start in starts:
                await self._send_piece(data[start : start + step], final=start == starts[-1])

    def _check_can_send(self) -> None:
        if self._failed is not None:
            raise self._failed.copy()
        if self._finished:
            raise StreamClosedError(f"stream {self.stream_id} is already finished")

    async def _send_piece(self, piece: memoryview, final: bool) -> None:
        await self._window.acquire()
        if self._failed is not None:
            raise self._failed.copy()
        try:
            slot = await self._handle.acquire_slot() if len(piece) else NO_SLOT
            self._handle.send(
                audio_header(self.stream_id, self._seq, slot, len(piece), final), piece
            )
        except WorkerError as gone:
            # The worker is dead (its pipe read EOF) but not yet reaped: its supervisor
            # fails this stream in a moment with the cause ("died (exit code -9)", "was
            # killed as hung"). Raise that rather than the bare "worker N is dead".
            with anyio.move_on_after(LOST_CAUSE_WAIT_S):
                await self._failed_event.wait()
            raise (self._failed or gone).copy() from None
        self._seq += 1

    async def receive(self) -> StreamResult:
        """The next result; ``anyio.EndOfStream`` after the final one."""
        try:
            item = await self._results.receive()
        except anyio.ClosedResourceError:
            raise anyio.EndOfStream from None
        if isinstance(item, GatewayError):
            raise item.copy()
        self._window.release()
        return item

    def __aiter__(self) -> AsyncIterator[StreamResult]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[StreamResult]:
        while True:
            try:
                yield await self.receive()
            except anyio.EndOfStream:
                return

    # StreamSink: called by the pool's router, on the event loop.
    def deliver(self, message: WorkerMessage) -> None:
        match message:
            case StreamResult():
                try:
                    self._results_in.send_nowait(message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the user closed the stream: nobody is listening
                if message.is_final:
                    self._done = True
                    self._results_in.close()
            case StreamFailed() | StreamExpired():
                self.fail(WorkerError(message.message))

    def fail(self, error: GatewayError) -> None:
        if self._failed is not None or self._done:
            return
        self._failed = error
        self._failed_event.set()
        self._done = True
        # Wake a sender waiting for a window permit so that it sees the failure.
        self._window.release()
        try:
            self._results_in.send_nowait(error)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        self._results_in.close()

    async def aclose(self) -> None:
        """Abandon the stream if it is not done: the worker drops its state. Safe twice."""
        if not self._done:
            self._done = True
            self._handle.streams.pop(self.stream_id, None)
            self._handle.close_stream(self.stream_id)
        self._results_in.close()
        self._results.close()

    async def __aenter__(self) -> AudioStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AudioStream {self.stream_id} on worker {self.worker_index}>"


async def decode_whole(stream: AudioStream, audio: Audio, *, text_is_delta: bool) -> Decoded:
    """Send a whole utterance on ``stream`` and gather every result it gives: the last
    result's payload whole (token times, sentences, tags, speakers), with the text of them
    all (their pieces joined, or the last one for an engine whose text is a running value)."""
    results: list[StreamResult] = []

    async def collect() -> None:
        async for result in stream:
            results.append(result)

    async with anyio.create_task_group() as group:
        group.start_soon(collect)
        await stream.finish(audio)
    if not results:
        return NOTHING
    texts = [result.text for result in results]
    text = "".join(texts) if text_is_delta else texts[-1]
    return replace(results[-1].decoded, text=text)
