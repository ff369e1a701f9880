"""What a FunASR client sends besides audio: the config that opens an utterance, the end
that closes it."""

from __future__ import annotations

import json

END = json.dumps({"is_speaking": False})


def config(**fields: object) -> str:
    """A config message: online, 600 ms chunks in 60 ms frames, unless ``fields`` say
    otherwise (the gateway's defaults but the mode, which is 2pass there)."""
    message: dict[str, object] = {
        "mode": "online",
        "chunk_size": [5, 10, 5],
        "chunk_interval": 10,
        "wav_name": "test",
        "is_speaking": True,
    }
    message.update(fields)
    return json.dumps(message)
