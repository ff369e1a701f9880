"""Which engine errors leave a GPU unusable (workers.worker.device_errors)."""

from __future__ import annotations

import pytest

from workers.worker.device_errors import broken_device


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        # PyTorch's (c10's CUDA check)
        (
            "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be"
            " asynchronously reported at some other API call",
            "CUDA error 700: an illegal memory access was encountered",
        ),
        ("CUDA error: unspecified launch failure", "CUDA error 719: unspecified launch failure"),
        (
            "CUDA error: device-side assert triggered",
            "CUDA error 710: device-side assert triggered",
        ),
        # ONNX Runtime's CUDA_CALL failures
        (
            "[ONNXRuntimeError] : 1 : FAIL : CUDA failure 700: an illegal memory access was"
            " encountered ; GPU=0 ; hostname=h ; file=cuda_call.cc ; line=123 ;"
            " expr=cudaStreamSynchronize(stream);",
            "CUDA error 700: an illegal memory access was encountered",
        ),
        (
            "CUDA failure 719: unspecified launch failure ; GPU=1",
            "CUDA error 719: unspecified launch failure",
        ),
        (
            "CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, k)`",
            "CUBLAS_STATUS_EXECUTION_FAILED",
        ),
    ],
)
def test_an_error_that_breaks_the_context_is_recognised(message: str, reason: str) -> None:
    assert broken_device(RuntimeError(message)) == reason


@pytest.mark.parametrize(
    "message",
    [
        "CUDA out of memory. Tried to allocate 2.00 GiB",
        "CUDA error: out of memory",
        "CUDA failure 2: out of memory ; GPU=0",
        "CUDA error: too many resources requested for launch",
        "asked to fail this step",
        "an illegal memory access was encountered",  # not a CUDA error's text
        "Expected all tensors to be on the same device, but found cuda:0 and cpu",
    ],
)
def test_an_error_that_fails_one_call_is_not(message: str) -> None:
    assert broken_device(RuntimeError(message)) is None
