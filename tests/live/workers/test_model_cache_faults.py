"""A full disk under the model cache (``ASR_MODEL_CACHE``): building a synthetic model or
exporting one to ONNX. Each case runs in a private mount namespace where the cache is a
small tmpfs (``fresh_process``), first too small, then grown: start-up fails in one line
naming the path and the cause, leaves nothing a later start would load as a whole model,
and the start after it, with room, serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fresh_process import findings, run_script
from workers.models.export.common import _write_atomically

LISTING = """
import subprocess
import numpy as np
from shared.errors import WorkerLoadError
from shared.settings import PoolSettings
from workers.pool import WorkerPool

def listing(root):
    return sorted(
        os.path.relpath(os.path.join(folder, name), root)
        for folder, folders, files in os.walk(root)
        for name in folders + files
    )

async def start_twice(settings, cache, roomy_size):
    try:
        async with WorkerPool(settings):
            pass
        error = None
    except WorkerLoadError as exc:
        error = str(exc)
    left = listing(cache)
    subprocess.run(["mount", "-o", f"remount,size={roomy_size}", cache], check=True)
    roomy = time.monotonic()
    async with WorkerPool(settings) as pool:
        text = await pool.transcribe(np.zeros(16000, dtype=np.int16))
        return error, left, isinstance(text, str), time.monotonic() - roomy
"""

BUILD = """
async def main():
    cache = sys.argv[1]
    settings = PoolSettings(model="synthetic:tiny", model_cache_dir=cache, devices=("cpu",))
    error, left, served, roomy_s = await start_twice(settings, cache, "16m")
    report(error=error, left=left, served=served, roomy_s=roomy_s, after=listing(cache))

if __name__ == "__main__":
    anyio.run(main)
"""


@pytest.mark.slow
def test_no_room_to_build_a_synthetic_model_fails_start_up_in_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    completed = run_script(
        LISTING + BUILD, tmp_path, tmpfs={str(cache): "256k"}, args=[str(cache)], timeout=300
    )
    found = findings(completed)
    error = found["error"]
    assert error is not None
    assert "\n" not in error
    assert error.startswith("ASR_MODEL=synthetic:tiny: ")
    assert f"{cache}/synthetic-streaming-tiny-seed0" in error
    assert "No space left on device" in error
    assert found["left"] == []  # no half-built directory, staged or not
    assert found["served"] is True
    assert found["after"] == [
        "synthetic-streaming-tiny-seed0",
        *(
            f"synthetic-streaming-tiny-seed0/{name}"
            for name in ("am.mvn", "config.yaml", "model.pt", "tokens.json")
        ),
    ]


EXPORT = """
import shutil

async def main():
    cache, pages = sys.argv[1], int(sys.argv[2])
    cases = {}
    for room_pages in map(int, sys.argv[3].split(",")):
        # The tmpfs holds the model and room_pages pages more; the next case starts afresh.
        size = f"{4 * (pages + room_pages)}k"
        subprocess.run(["mount", "-o", f"remount,size={size}", cache], check=True)
        model = os.path.join(cache, f"model-{room_pages}")
        # The model's own files: not its exports (ours, sherpa's), which other tests add.
        shutil.copytree(SOURCE, model, ignore=shutil.ignore_patterns("onnx-*"))
        settings = PoolSettings(
            model=model, model_cache_dir=cache, devices=("cpu",), runtime="onnx"
        )
        error, left, served, roomy_s = await start_twice(settings, cache, "16m")
        cases[room_pages] = dict(model=model, error=error, left=left, served=served)
        shutil.rmtree(model)
    report(cases=cases)

if __name__ == "__main__":
    anyio.run(main)
"""
ROOM_PAGES = (16, 200, 267)


@pytest.fixture(scope="module")
def export_faults(tmp_path_factory: pytest.TempPathFactory, tiny_streaming_model: Path) -> Any:
    """Every room size's case, in one fresh process (one import of torch and funasr for
    the three), each on a tmpfs of the model's pages and that many more."""
    tmp_path = tmp_path_factory.mktemp("export-faults")
    cache = tmp_path / "cache"
    cache.mkdir()
    pages = sum(-(-p.stat().st_size // 4096) for p in tiny_streaming_model.iterdir() if p.is_file())
    script = LISTING + EXPORT.replace("SOURCE", repr(str(tiny_streaming_model)))
    room = ",".join(map(str, ROOM_PAGES))
    completed = run_script(
        script,
        tmp_path,
        tmpfs={str(cache): f"{4 * pages}k"},
        args=[str(cache), str(pages), room],
        timeout=600,
    )
    return findings(completed)["cases"]


@pytest.mark.slow
@pytest.mark.parametrize("room_pages", ROOM_PAGES)
def test_no_room_for_the_onnx_export_fails_start_up_in_one_line(
    room_pages: int, export_faults: Any
) -> None:
    """Room for the model and ``room_pages`` pages more (tmpfs counts whole pages): the
    export fails writing its first graph (16), its second (200: the encoder's 188 pages
    and the positional table's one are written) or its manifest (267: both graphs are)."""
    found = export_faults[str(room_pages)]
    model = found["model"]
    error = found["error"]
    assert error is not None
    assert "\n" not in error
    assert error.startswith(f"ONNX export of {model} failed: ")
    assert "No space left on device" in error
    # Whatever the failed export left, no manifest vouches for it: the next start exports
    # again instead of loading it.
    name = Path(model).name
    assert f"{name}/onnx-gateway/manifest.json" not in found["left"]
    assert not [entry for entry in found["left"] if "tmp" in entry]
    assert found["served"] is True


def test_a_small_file_written_atomically_on_a_full_disk_leaves_nothing(tmp_path: Path) -> None:
    """The export's manifest: a failed write leaves neither the file nor its temporary."""
    full = tmp_path / "full"
    full.mkdir()
    script = f"""
from workers.models.export.common import _write_atomically
folder = {str(full)!r}
filler = os.open(os.path.join(folder, "filler"), os.O_CREAT | os.O_WRONLY, 0o600)
try:
    while True:
        os.write(filler, bytes(4096))
except OSError:
    os.close(filler)
try:
    _write_atomically(__import__("pathlib").Path(folder) / "manifest.json", bytes(10000))
    error = None
except OSError as exc:
    error = str(exc)
os.unlink(os.path.join(folder, "filler"))
report(error=error, left=sorted(os.listdir(folder)))
"""
    found = findings(run_script(script, tmp_path, tmpfs={str(full): "64k"}))
    assert "No space left on device" in found["error"]
    assert found["left"] == []
    # And with room, it writes the whole file.
    _write_atomically(tmp_path / "manifest.json", b"{}")
    assert (tmp_path / "manifest.json").read_bytes() == b"{}"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("tmp")] == []
