"""An ONNX Runtime session on the device asked for, or a refusal that says why
(workers.engines.runtime.onnx_session), with PyPI's CPU-only onnxruntime.

The silent fallback is made honestly: onnxruntime-gpu lists ``CUDAExecutionProvider`` as
available whatever its libraries do, and builds the session on the CPU where they do not
load; here the list is made to say the same, and the real session is built as it would be.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from workers.engines.runtime import placement
from workers.engines.runtime.onnx_session import (
    CPU,
    CUDA,
    GpuUnavailable,
    check_providers,
    cuda_load_error,
    missing_runtime,
    open_session,
)

pytestmark = pytest.mark.skipif(
    CUDA in ort.get_available_providers(), reason="this onnxruntime has a CUDA provider"
)


def _doubling_graph() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])
    node = helper.make_node("Add", ["x", "x"], ["y"])
    graph = helper.make_graph([node], "double", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    serialized: bytes = model.SerializeToString()
    return serialized


@pytest.fixture(autouse=True)
def _fresh_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement, "_providers", [])


def test_a_cpu_session_runs_and_says_so() -> None:
    session = open_session(_doubling_graph(), "cpu", threads=1)
    (out,) = session.run(None, {"x": np.array([1.5, -2.0], dtype=np.float32)})
    assert out.tolist() == [3.0, -4.0]
    assert placement.provider_in_use() == CPU


def test_the_cpu_build_refuses_a_gpu_naming_the_package_to_install() -> None:
    with pytest.raises(GpuUnavailable) as refused:
        open_session(_doubling_graph(), "cuda:0", threads=1)
    assert str(refused.value) == (
        f"cuda:0 requested, but onnxruntime {ort.__version__} has no {CUDA}: pip install"
        " 'asr-gateway[gpu]' (onnxruntime-gpu) in place of [cpu]"
    )
    # What the pool asks before exporting: the same refusal, onnxruntime not imported.
    assert missing_runtime(("cpu", "cuda:0")) == str(refused.value)
    assert missing_runtime(("cpu",)) is None
    assert placement.provider_in_use() is None


def test_a_session_that_fell_back_to_the_cpu_is_refused_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, CPU])
    # onnxruntime warns that the provider it was asked for is not in its build, and builds
    # the session on the CPU: the fallback a worker must never serve on.
    with (
        pytest.warns(UserWarning, match=CUDA),
        pytest.raises(GpuUnavailable) as refused,
    ):
        open_session(_doubling_graph(), "cuda:0", threads=1)
    assert str(refused.value) == (
        f"cuda:0 requested, but onnxruntime {ort.__version__} built the session on {CPU}:"
        f" {CUDA} did not load ({cuda_load_error()})"
    )
    assert "libonnxruntime_providers_cuda.so is not installed" in cuda_load_error()
    assert placement.provider_in_use() is None


def test_a_session_whose_first_provider_is_cuda_passes() -> None:
    check_providers("cuda:0", [CUDA, CPU], "1.0")
    with pytest.raises(GpuUnavailable, match=f"built the session on {CPU}, {CUDA}"):
        check_providers("cuda:0", [CPU, CUDA], "1.0")


def test_without_onnxruntime_the_pool_is_told_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "onnxruntime" else real_find_spec(name, *args),
    )
    assert missing_runtime(("cpu",)) == (
        "onnxruntime is not installed: pip install 'asr-gateway[cpu]' (or [gpu], where"
        " workers run on GPUs)"
    )
