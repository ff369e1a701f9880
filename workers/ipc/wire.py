"""The command messages that cross a worker's pipe, and the slab's slot layout.

Audio never crosses the pipe: the parent writes it into a slot of the worker's shared-memory
slab and sends only a fixed 40-byte header. OPEN alone has more: the stream's hotwords, as
UTF-8 after its header in the same message, then its speech regions (two little-endian
uint32 each); ``length`` counts both, the header's last field the regions.
Pure data, no I/O: both sides import it.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from shared.messages import SPOKEN_LANGUAGES, StreamOptions


class CommandKind(enum.IntEnum):
    OPEN = 1  # bind a stream to this worker, with its decoding options (hotwords after)
    AUDIO = 2  # samples in ``slot`` (shm) or after the header (queue)
    CLOSE = 3  # the stream was abandoned: drop its state, send nothing
    STOP = 4  # finish what is queued, then exit


FLAG_FINAL = 0x01  # the last audio of the stream: flush and send the final result
FLAG_ITN = 0x02  # OPEN: the stream's options ask for inverse text normalization
FLAG_MODEL_ITN = 0x04  # OPEN: a model with its own ITN (SenseVoice) is to use it
FLAG_NO_FINAL_DECODE = 0x08  # OPEN: a re-decoding engine need not decode the whole at the end
FLAG_WINDOW_EMBEDDINGS = 0x10  # OPEN: a speaker model answers its windows' embeddings
NO_SLOT = -1

# kind, flags, OPEN's language (its index in SPOKEN_LANGUAGES), (pad), stream_id, seq, slot,
# length in bytes, sent_ns (CLOCK_MONOTONIC, which all processes on the machine share),
# chunk_size[0..2], encoder and decoder look-back, OPEN's speech region count.
_HEADER = struct.Struct("<BBBxIIiIQ5HH")
_REGION = struct.Struct("<II")
HEADER_SIZE = _HEADER.size
# OPEN's payload: the hotwords joined by one space (whitespace, which no word contains), the
# way StreamOptions counts them against MAX_HOTWORDS_BYTES.
_HOTWORD_SEPARATOR = " "


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
        """The whole pipe message: the header, then for OPEN the hotwords, whose byte count
        is the ``length`` written (whatever ``self.length`` says)."""
        options = self.options or StreamOptions()
        a, b, c = options.chunk_size
        payload = b""
        length = self.length
        flags = self.flags
        language = 0
        regions = 0
        if self.kind is CommandKind.OPEN:
            payload = _HOTWORD_SEPARATOR.join(options.hotwords).encode("utf-8")
            regions = len(options.speech_regions)
            payload += b"".join(_REGION.pack(*region) for region in options.speech_regions)
            length = len(payload)
            flags |= FLAG_ITN if options.itn else 0
            flags |= FLAG_MODEL_ITN if options.model_itn else 0
            flags |= 0 if options.final_decode else FLAG_NO_FINAL_DECODE
            flags |= FLAG_WINDOW_EMBEDDINGS if options.window_embeddings else 0
            language = SPOKEN_LANGUAGES.index(options.language)
        header = _HEADER.pack(
            self.kind,
            flags,
            language,
            self.stream_id,
            self.seq,
            self.slot,
            length,
            self.sent_ns,
            a,
            b,
            c,
            options.encoder_chunk_look_back,
            options.decoder_chunk_look_back,
            regions,
        )
        return header + payload

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> CommandHeader:
        """Decode one pipe message; ``ValueError`` if it is not exactly one command."""
        if len(data) < HEADER_SIZE:
            raise ValueError(f"a command is at least {HEADER_SIZE} bytes, got {len(data)}")
        fields = _HEADER.unpack(data[:HEADER_SIZE])
        (
            kind,
            flags,
            language,
            stream_id,
            seq,
            slot,
            length,
            sent_ns,
            a,
            b,
            c,
            enc,
            dec,
            regions,
        ) = fields
        command_kind = CommandKind(kind)
        payload = data[HEADER_SIZE:]
        if len(payload) != (length if command_kind is CommandKind.OPEN else 0):
            raise ValueError(
                f"{command_kind.name} command: {len(payload)} bytes after the header"
                f" (length field {length})"
            )
        options = None
        if command_kind is CommandKind.OPEN:
            regions_at = length - regions * _REGION.size
            if regions_at < 0:
                raise ValueError(f"OPEN command: {regions} speech regions in {length} bytes")
            options = StreamOptions(
                chunk_size=(a, b, c),
                encoder_chunk_look_back=enc,
                decoder_chunk_look_back=dec,
                hotwords=_decode_hotwords(payload[:regions_at]),
                speech_regions=tuple(_REGION.iter_unpack(payload[regions_at:])),
                itn=bool(flags & FLAG_ITN),
                language=_language(language),
                model_itn=bool(flags & FLAG_MODEL_ITN),
                final_decode=not flags & FLAG_NO_FINAL_DECODE,
                window_embeddings=bool(flags & FLAG_WINDOW_EMBEDDINGS),
            )
        return cls(command_kind, stream_id, seq, slot, length, flags, sent_ns, options)


def _language(index: int) -> str:
    if index >= len(SPOKEN_LANGUAGES):
        raise ValueError(f"OPEN command: language {index} is not one of {len(SPOKEN_LANGUAGES)}")
    return SPOKEN_LANGUAGES[index]


def _decode_hotwords(payload: bytes | memoryview) -> tuple[str, ...]:
    """The words of an OPEN payload; StreamOptions then refuses what no sender would send
    (an empty word from doubled separators, too many, too long)."""
    try:
        text = bytes(payload).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"OPEN command: hotwords are not UTF-8 ({exc})") from None
    return tuple(text.split(_HOTWORD_SEPARATOR)) if text else ()


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
