"""Audio as both sides hold it: 16 kHz mono int16 PCM samples."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Samples = npt.NDArray[np.int16]
