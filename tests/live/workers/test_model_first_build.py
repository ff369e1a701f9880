"""A gateway's pools resolve their models at once, each in a thread: a first start builds
several synthetic models (each importing funasr) side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# A fresh interpreter: in the test process funasr is imported already, and the race is
# between first imports.
SCRIPT = """
import json, sys, threading
from shared.engines import Role
from workers.models.resolve import resolve_model

outcomes = {}

def resolve(kind):
    try:
        outcomes[kind] = resolve_model("synthetic:tiny", sys.argv[1], Role(kind)).kind.name
    except BaseException as exc:
        outcomes[kind] = repr(exc)

threads = [threading.Thread(target=resolve, args=(k,)) for k in sys.argv[2:]]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(outcomes))
"""


def test_models_of_several_kinds_build_in_threads_at_once(tmp_path: Path) -> None:
    kinds = ["offline", "vad", "punc", "streaming"]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), *kinds],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    outcomes = json.loads(done.stdout.splitlines()[-1])
    # Before the builds took turns, two or three of the four raised importlib's
    # _DeadlockError (funasr.models.bicif_paraformer, ct_transformer, fsmn_vad_streaming).
    assert outcomes == {
        "offline": "paraformer-offline",
        "vad": "fsmn-vad",
        "punc": "ct-transformer",
        "streaming": "paraformer-streaming",
    }
