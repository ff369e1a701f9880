"""A user's own engine, served by the gateway from outside its tree: a telephone keypad
(DTMF) recogniser. Model-free, and real: it hears the keys a caller presses, as an IVR does.

Serve it with a models file (``ASR_MODELS``) whose entry names the class by import path,
with this folder on the import path (``PYTHONPATH=docs/examples``)::

    default = "keypad"

    [models.keypad]
    model = "dtmf"                      # handed to load() as spec.model_dir: none needed here
    engine = "dtmf_engine:DtmfEngine"
    devices = ["cpu"]

docs/adding-a-model.md walks through it. Each key is a pair of tones, one of four rows
(697-941 Hz) and one of four columns (1209-1633 Hz); the power of the eight is measured in
each block of audio, and a key is heard where one row and one column stand far
above the rest for ``MIN_BLOCKS`` blocks in a row. Each result's text is the keys heard in
its piece (``text_is_delta``): a stream's text is its results' texts joined.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from shared.engines import EngineCapabilities
from shared.messages import Decoded, EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.table import TableEngine

RATE = 16_000
ROWS = (697.0, 770.0, 852.0, 941.0)
COLUMNS = (1209.0, 1336.0, 1477.0, 1633.0)
KEYS = ("123A", "456B", "789C", "*0#D")
BLOCK = 320  # 20 ms: the ITU's 40 ms shortest tone is two blocks
MIN_BLOCKS = 2  # a key is heard once it holds this many blocks in a row
TWIST = 10.0  # each of the pair stands this many times above the next strongest of its group
FLOOR = 1e4  # below this power (int16 units squared, per sample) a block is silence


# The eight tones' cosines and sines over a block: a block's power at each tone is its
# projection on them (a DFT at exactly those eight frequencies, as Goertzel's filter gives).
_TIMES = np.arange(BLOCK) / RATE
_COS = np.cos(2 * np.pi * np.outer(ROWS + COLUMNS, _TIMES))
_SIN = np.sin(2 * np.pi * np.outer(ROWS + COLUMNS, _TIMES))


def tone_powers(block: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The power of each of the eight DTMF frequencies in ``block`` (per sample)."""
    power: npt.NDArray[np.float64] = ((_COS @ block) ** 2 + (_SIN @ block) ** 2) / len(block)
    return power


def key_in(block: npt.NDArray[np.float64]) -> str | None:
    """The key a block holds, or None (silence, speech, two keys at once)."""
    powers = tone_powers(block)
    rows, columns = powers[:4], powers[4:]
    row, column = int(np.argmax(rows)), int(np.argmax(columns))
    strongest = (np.sort(rows)[-2], np.sort(columns)[-2])
    if min(rows[row], columns[column]) < FLOOR:
        return None
    if rows[row] < TWIST * strongest[0] or columns[column] < TWIST * strongest[1]:
        return None
    return KEYS[row][column]


@dataclass(slots=True)
class _Caller:
    """One stream: samples not yet a whole block, and the key of the blocks before."""

    pending: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    key: str | None = None
    run: int = 0  # blocks in a row holding ``key``
    told: bool = False  # ``key`` was reported in this run


class DtmfEngine(TableEngine[_Caller]):
    """The engine interface: ``load`` on a device, then streams opened, fed in batches
    (``feed``: one answer per piece), closed; ``TableEngine`` keeps the streams' state and
    answers pieces of unknown or failed streams, idle expiry and finals for it."""

    name = "dtmf"
    capabilities = EngineCapabilities(text_is_delta=True)

    @classmethod
    def load(cls, spec: EngineSpec) -> DtmfEngine:
        if spec.device != "cpu":
            raise ValueError(f"the DTMF engine runs on the CPU, not {spec.device}")
        return cls()

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self.streams.open(stream_id, _Caller())

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        return self.streams.step(items).each(_hear)


def _hear(caller: _Caller, item: ChunkItem) -> Decoded:
    audio = np.concatenate([caller.pending, item.samples.astype(np.float64)])
    whole = len(audio) // BLOCK * BLOCK
    caller.pending = audio[whole:]
    heard = []
    for start in range(0, whole, BLOCK):
        key = key_in(audio[start : start + BLOCK])
        if key == caller.key:
            caller.run += 1
        else:
            caller.key, caller.run, caller.told = key, 1, False
        if key is not None and caller.run >= MIN_BLOCKS and not caller.told:
            heard.append(key)
            caller.told = True
    return Decoded("".join(heard))
