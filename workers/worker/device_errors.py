"""Which engine errors leave a worker's GPU unusable for good.

Most CUDA errors fail one call: out of memory, a bad argument, too many resources for a
launch. A few are sticky: the CUDA context is corrupted and every later call in the
process fails with the same error (CUDA's programming guide, "Error Checking"; NVIDIA's Xid
catalogue for the hardware side). A worker that met one must not stay in rotation failing
every step: it exits, and the pool replaces it with a fresh process and context.

The errors are recognised by the text the runtimes put in their exceptions: PyTorch's
``CUDA error: <cudaGetErrorString>`` and ONNX Runtime's ``CUDA failure <code>: <string>``
(and cuBLAS/cuDNN's execution failures, which follow a broken context).
"""

from __future__ import annotations

import re

# cudaError_t values after which the context cannot be used again (CUDA runtime API,
# "Data types: cudaError"): illegal address, launch timeout, context destroyed or
# unavailable, device-side assert, hardware stack error, illegal instruction, misaligned
# address, invalid address space, invalid PC, launch failure, uncorrectable ECC, unknown.
STICKY_CUDA_ERRORS: dict[int, str] = {
    700: "an illegal memory access was encountered",
    702: "the launch timed out and was terminated",
    709: "context is destroyed",
    710: "device-side assert triggered",
    714: "hardware stack error",
    715: "an illegal instruction was encountered",
    716: "misaligned address",
    717: "operation not supported on global/shared address space",
    718: "invalid program counter",
    719: "unspecified launch failure",
    214: "uncorrectable ECC error encountered",
    999: "unknown error",
}
_ORT_FAILURE = re.compile(r"CUDA failure (\d+):")
_LIBRARY_FAILURES = ("CUBLAS_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_EXECUTION_FAILED")


def broken_device(error: BaseException) -> str | None:
    """Why ``error`` leaves this process's GPU unusable, or ``None`` where it does not (the
    step failed; the worker can serve the next one)."""
    text = str(error)
    match = _ORT_FAILURE.search(text)
    if match is not None and int(match.group(1)) in STICKY_CUDA_ERRORS:
        return f"CUDA error {match.group(1)}: {STICKY_CUDA_ERRORS[int(match.group(1))]}"
    lowered = text.lower()
    if "cuda error" in lowered:
        for code, description in STICKY_CUDA_ERRORS.items():
            if description in lowered:
                return f"CUDA error {code}: {description}"
    for failure in _LIBRARY_FAILURES:
        if failure in text:
            return failure
    return None
