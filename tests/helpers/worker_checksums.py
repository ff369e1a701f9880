"""What the checksum engine should answer, computed locally from what was sent."""

from __future__ import annotations

import zlib

import numpy as np
import numpy.typing as npt


def expected_checksum(samples: npt.NDArray[np.int16]) -> str:
    return f"{len(samples)}:{zlib.crc32(samples.astype('<i2').tobytes()):08x}"
