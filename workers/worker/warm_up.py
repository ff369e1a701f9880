"""One throwaway stream through a GPU worker's engine before it reports ready.

The first call on a GPU pays for what later calls reuse: cuDNN's and cuBLAS's handles and
workspaces, kernel loading, the CUDA arena's first blocks. Paid at load, it is neither a
user's first chunk's latency nor missing from the worker's measured GPU memory
(``workers.worker.gpu_memory``). A second of silence goes in as one final piece, through
the engine's own interface, so any engine (a user's too) warms the way it serves.
"""

from __future__ import annotations

import logging

import numpy as np

from shared.messages import StreamOptions
from workers.engines.base import ChunkItem, Engine
from workers.worker.device_errors import broken_device

logger = logging.getLogger(__name__)

WARM_UP_STREAM = -1  # never a real stream's id (the pool's ids count up from 1)
WARM_UP_SAMPLES = 16_000  # one second at 16 kHz


class WarmUpBroke(RuntimeError):
    """The warm-up met an error that leaves the GPU unusable: the worker cannot serve."""


def warm_up(engine: Engine) -> None:
    """Decode one second of silence as a stream of its own, then drop it. An error that
    breaks the device fails the load (:class:`WarmUpBroke`); any other is logged and
    forgotten (an engine may refuse silence, e.g. a speaker model with no speech in it)."""
    silence = np.zeros(WARM_UP_SAMPLES, dtype=np.int16)
    try:
        engine.open_stream(WARM_UP_STREAM, StreamOptions())
        engine.feed([ChunkItem(WARM_UP_STREAM, 0, silence, final=True)])
    except Exception as exc:
        reason = broken_device(exc)
        if reason is not None:
            raise WarmUpBroke(f"the warm-up broke the GPU ({reason})") from exc
        logger.warning("%s: the warm-up failed (%s); serving anyway", engine.name, exc)
    finally:
        try:
            engine.close_stream(WARM_UP_STREAM)
        except Exception:
            pass  # never opened, or already dropped by the failure
