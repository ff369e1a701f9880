"""Audio as numbers: PCM facts, chunks, resampling, the energy endpointer, where to cut long
audio. Pure functions and constants: no anyio, no starlette, nothing of the gateway's."""
