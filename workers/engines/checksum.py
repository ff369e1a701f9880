"""A model-free engine that makes any lost, duplicated or reordered byte visible.

Each result's text is ``"<n>:<crc>"``: the number of int16 samples the stream has received so
far and the CRC-32 of all their little-endian bytes in order, as 8 lowercase hex digits. A
client that computes the same over what it sent verifies the whole pipeline end to end. It
is a product feature: it load-tests the transport with no model in the way.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from shared.messages import StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput, expire_idle_streams, unknown_stream_output


def checksum_text(samples: int, crc: int) -> str:
    return f"{samples}:{crc:08x}"


@dataclass(slots=True)
class _ChecksumState:
    samples: int = 0
    crc: int = 0
    last_fed: float = 0.0


class ChecksumEngine:
    name = "checksum"

    def __init__(self) -> None:
        self._streams: dict[int, _ChecksumState] = {}

    @property
    def active_streams(self) -> int:
        return len(self._streams)

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self._streams[stream_id] = _ChecksumState(last_fed=time.monotonic())

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        outputs: list[ChunkOutput] = []
        now = time.monotonic()
        for item in items:
            state = self._streams.get(item.stream_id)
            if state is None:
                outputs.append(unknown_stream_output(item))
                continue
            # int16 arrays are little-endian on every platform we run on; astype makes sure.
            data = item.samples.astype("<i2", copy=False).tobytes()
            state.crc = zlib.crc32(data, state.crc)
            state.samples += len(item.samples)
            state.last_fed = now
            text = checksum_text(state.samples, state.crc)
            outputs.append(ChunkOutput(item.stream_id, item.seq, text, item.final))
            if item.final:
                del self._streams[item.stream_id]
        return outputs

    def close_stream(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)

    def expire_idle(self, now: float, idle_timeout_s: float) -> list[int]:
        return expire_idle_streams(self._streams, now, idle_timeout_s)
