"""What a pool's start asks of ``workers.models.ready`` before any torch is imported: whether
a synthetic model is still to be built, and the one-line failure it reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.engines import Role
from workers.models.ready import REPORTED_FAILURE, main
from workers.models.resolve import synthetic_dir, unbuilt_synthetic


def test_a_synthetic_model_not_in_the_cache_is_unbuilt_with_its_kind(tmp_path: Path) -> None:
    found = {
        model: unbuilt_synthetic(model, str(tmp_path), role)
        for model, role in (
            ("synthetic:large", Role.STREAMING),
            ("synthetic:tiny", Role.OFFLINE),
            ("synthetic-sensevoice:tiny", Role.OFFLINE),
        )
    }
    assert {model: kind.name if kind else None for model, kind in found.items()} == {
        "synthetic:large": "paraformer-streaming",
        "synthetic:tiny": "paraformer-offline",
        "synthetic-sensevoice:tiny": "sensevoice",
    }


def test_a_built_one_a_directory_or_a_bad_name_is_not(tmp_path: Path) -> None:
    built = synthetic_dir(tmp_path, "streaming", "tiny")
    built.mkdir()
    (built / "model.pt").write_bytes(b"")
    assert unbuilt_synthetic("synthetic:tiny", str(tmp_path)) is None
    assert unbuilt_synthetic(str(built), str(tmp_path)) is None
    assert unbuilt_synthetic("synthetic:huge", str(tmp_path)) is None
    assert unbuilt_synthetic("paraformer-zh-streaming", str(tmp_path)) is None


def test_a_failure_is_one_line_on_stderr_under_its_own_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["synthetic:huge", "--cache", str(tmp_path), "--engine", "paraformer-onnx"])
    assert status == REPORTED_FAILURE
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("ASR_MODEL=synthetic:huge: use synthetic:tiny or synthetic:large")
