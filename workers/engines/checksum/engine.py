"""A model-free engine that makes any lost, duplicated or reordered byte visible.

Each result's text is ``"<n>:<crc>"``: the number of int16 samples the stream has received so
far and the CRC-32 of all their little-endian bytes in order, as 8 lowercase hex digits. A
client that computes the same over what it sent verifies the whole pipeline end to end. It
is a product feature: it load-tests the transport with no model in the way.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from shared.engines import EngineCapabilities
from shared.messages import Decoded, EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.table import TableEngine


def checksum_text(samples: int, crc: int) -> str:
    return f"{samples}:{crc:08x}"


@dataclass(slots=True)
class _ChecksumState:
    samples: int = 0
    crc: int = 0


class ChecksumEngine(TableEngine[_ChecksumState]):
    name = "checksum"
    # Each text is the running value: the samples and CRC of everything so far.
    capabilities = EngineCapabilities(text_is_delta=False)

    @classmethod
    def load(cls, spec: EngineSpec) -> ChecksumEngine:
        return cls()

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self.streams.open(stream_id, _ChecksumState())

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        return self.streams.step(items).each(_add)


def _add(state: _ChecksumState, item: ChunkItem) -> Decoded:
    # int16 arrays are little-endian on every platform we run on; astype makes sure.
    data = item.samples.astype("<i2", copy=False).tobytes()
    state.crc = zlib.crc32(data, state.crc)
    state.samples += len(item.samples)
    return Decoded(checksum_text(state.samples, state.crc))
