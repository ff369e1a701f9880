"""The mapped copy of an ONNX graph: made once, read by every session of it, mapped (not
copied) into the process, with the same outputs; remade when the graph changes; and a
worker that cannot make one opens the graph as it is."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from workers.engines.runtime import mapped_copy as mapped_copy_module  # noqa: E402
from workers.engines.runtime.mapped_copy import GRAPH, MAPPED_DIR, WEIGHTS, mapped_copy  # noqa: E402
from workers.engines.runtime.onnx_session import open_session, use_mapped_weights  # noqa: E402

WIDTH = 64


def write_graph(path: Path, seed: int = 0) -> Path:
    """Two MatMuls (weights large enough to map and to prepack) and a ReLU between."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32), name)
        for name in ("first", "second")
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "first"], ["hidden"]),
        helper.make_node("Relu", ["hidden"], ["positive"]),
        helper.make_node("MatMul", ["positive", "second"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", WIDTH])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def run(session: Any) -> np.ndarray[Any, Any]:
    feeds = {"x": np.random.default_rng(1).standard_normal((5, WIDTH)).astype(np.float32)}
    output: np.ndarray[Any, Any] = session.run(None, feeds)[0]
    return output


@pytest.fixture(autouse=True)
def mapped_on() -> Any:
    use_mapped_weights(True)
    yield
    use_mapped_weights(True)


def test_the_copy_is_made_once_and_gives_the_same_outputs(tmp_path: Path) -> None:
    source = write_graph(tmp_path / "encoder.onnx")
    copy = mapped_copy(source)
    assert copy.name == GRAPH
    assert copy.parent.parent == tmp_path / MAPPED_DIR
    assert (copy.parent / WEIGHTS).stat().st_size > 2 * WIDTH * WIDTH * 4  # the weights
    made_at = copy.stat().st_mtime_ns
    assert mapped_copy(source) == copy  # found, not made again
    assert copy.stat().st_mtime_ns == made_at

    import onnxruntime as ort

    plain = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    assert np.array_equal(run(open_session(source, "cpu", 1)), run(plain))


def test_a_session_maps_the_copys_weights_instead_of_reading_them(tmp_path: Path) -> None:
    source = write_graph(tmp_path / "decoder.onnx")
    session = open_session(source, "cpu", 1)
    run(session)
    weights = mapped_copy(source).parent / WEIGHTS
    assert str(weights) in Path("/proc/self/maps").read_text()


def test_a_changed_graph_gets_a_new_copy_and_its_old_one_goes(tmp_path: Path) -> None:
    source = write_graph(tmp_path / "encoder.onnx")
    neighbour = write_graph(tmp_path / "encoder_int8.onnx")  # a name that extends the first
    old, kept = mapped_copy(source), mapped_copy(neighbour)
    write_graph(source, seed=2)
    os.utime(source, ns=(old.stat().st_mtime_ns + 10**9,) * 2)
    new = mapped_copy(source)
    assert new != old
    assert new.is_file()
    assert not old.parent.exists()
    assert kept.is_file()

    import onnxruntime as ort

    plain = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    copied = ort.InferenceSession(str(new), providers=["CPUExecutionProvider"])
    assert np.array_equal(run(copied), run(plain))


def test_what_a_killed_maker_left_is_cleared(tmp_path: Path) -> None:
    source = write_graph(tmp_path / "encoder.onnx")
    leftover = tmp_path / MAPPED_DIR / ".making-encoder-abandoned"
    leftover.mkdir(parents=True)
    (leftover / WEIGHTS).write_bytes(b"half")
    assert mapped_copy(source).is_file()
    assert not leftover.exists()


def test_no_copy_can_be_made_the_graph_is_opened_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = write_graph(tmp_path / "encoder.onnx")
    (tmp_path / MAPPED_DIR).write_text("a file where the directory would be")
    with caplog.at_level(logging.WARNING, logger=mapped_copy_module.__name__):
        assert mapped_copy(source) == source
        session = open_session(source, "cpu", 1)
    assert "no mapped copy" in caplog.text
    assert run(session).shape == (5, WIDTH)


def test_a_worker_told_not_to_opens_the_graph_itself(tmp_path: Path) -> None:
    source = write_graph(tmp_path / "encoder.onnx")
    use_mapped_weights(False)
    run(open_session(source, "cpu", 1))
    assert not (tmp_path / MAPPED_DIR).exists()


def test_the_key_follows_the_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = write_graph(tmp_path / "encoder.onnx")
    here = mapped_copy(source)
    monkeypatch.setattr(mapped_copy_module, "cpu_fingerprint", lambda: "another CPU")
    elsewhere = mapped_copy(source)
    assert elsewhere != here
    assert elsewhere.is_file()


def test_a_maker_that_fails_leaves_nothing_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "encoder.onnx"
    source.write_bytes(b"not a graph")
    with caplog.at_level(logging.WARNING, logger=mapped_copy_module.__name__):
        assert mapped_copy(source) == source
    assert "making the copy failed" in caplog.text
    assert [p.name for p in (tmp_path / MAPPED_DIR).iterdir()] == [".encoder.lock"]
