"""The fixed-size command header that crosses a worker's pipe, and the slab's slot layout.

Audio never crosses the pipe: the parent writes it into a slot of the worker's shared-memory
slab and sends only this 40-byte header. Pure data, no I/O: both sides import it.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from shared.messages import StreamOptions


class CommandKind(enum.IntEnum):
    OPEN = 1  # bind a stream to this worker, with its decoding options
    AUDIO = 2  # samples in ``slot`` (shm) or after the header (queue)
    CLOSE = 3  # the stream was abandoned: drop its state, send nothing
    STOP = 4  # finish what is queued, then exit


FLAG_FINAL = 0x01  # the last audio of the stream: flush and send the final result
NO_SLOT = -1

# kind, flags, (pad), stream_id, seq, slot, length in bytes, sent_ns (CLOCK_MONOTONIC, which
# all processes on the machine share), chunk_size[0..2], encoder and decoder look-back.
_HEADER = struct.Struct("<BBxxIIiIQ5H2x")
HEADER_SIZE = _HEADER.size


@dataclass(frozen=True, slots=True)
class CommandHeader:
    kind: CommandKind
    stream_id: int
    seq: int = 0
    slot: int = NO_SLOT
    length: int = 0
    flags: int = 0
    sent_ns: int = 0
    options: StreamOptions | None = None

    @property
    def final(self) -> bool:
        return bool(self.flags & FLAG_FINAL)

    def pack(self) -> bytes:
        options = self.options or StreamOptions()
        a, b, c = options.chunk_size
        return _HEADER.pack(
            self.kind,
            self.flags,
            self.stream_id,
            self.seq,
            self.slot,
            self.length,
            self.sent_ns,
            a,
            b,
            c,
            options.encoder_chunk_look_back,
            options.decoder_chunk_look_back,
        )

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> CommandHeader:
        kind, flags, stream_id, seq, slot, length, sent_ns, a, b, c, enc, dec = _HEADER.unpack(data)
        command_kind = CommandKind(kind)
        options = None
        if command_kind is CommandKind.OPEN:
            options = StreamOptions(
                chunk_size=(a, b, c),
                encoder_chunk_look_back=enc,
                decoder_chunk_look_back=dec,
            )
        return cls(command_kind, stream_id, seq, slot, length, flags, sent_ns, options)


@dataclass(frozen=True, slots=True)
class SlabLayout:
    """A slab of ``slot_count`` slots of ``slot_bytes`` each, back to back."""

    slot_bytes: int
    slot_count: int

    def __post_init__(self) -> None:
        if self.slot_bytes <= 0 or self.slot_bytes % 2:
            raise ValueError("slot_bytes must be a positive even number (int16 samples)")
        if self.slot_count <= 0:
            raise ValueError("slot_count must be positive")

    @property
    def size(self) -> int:
        return self.slot_bytes * self.slot_count

    def bounds(self, slot: int, length: int) -> slice:
        """The byte range of the first ``length`` bytes of ``slot``."""
        if not 0 <= slot < self.slot_count:
            raise ValueError(f"slot {slot} out of range 0..{self.slot_count - 1}")
        if not 0 <= length <= self.slot_bytes:
            raise ValueError(f"length {length} does not fit a slot of {self.slot_bytes} bytes")
        start = slot * self.slot_bytes
        return slice(start, start + length)
