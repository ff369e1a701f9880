"""Steps 0 to 2 of ``bench/device/check.sh``: what the machine is and has. 0 ``env``: the
versions, the GPU, onnxruntime's providers, and the engine the later steps use; 1
``wheels``: the carried wheels installed (there) or pip's dry run of that (here); 2
``cuda-tests``: ``tests/live/workers/test_cuda.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.device import wheels as device_wheels
from bench.device.gateway import nvidia_smi
from bench.device.records import KEYS, PYTHON, Row, Status, StepRecord


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


# -- 0: the environment ------------------------------------------------------------------


def env_step(args: argparse.Namespace) -> StepRecord:
    """Versions, the GPU, onnxruntime's providers, and the engine the GPU steps use:
    the ONNX engine where onnxruntime has a CUDA provider, else PyTorch's (the fallback
    that still measures the GPU)."""
    started = time.monotonic()
    import onnxruntime as ort
    import torch

    providers = list(ort.get_available_providers())
    gpus = nvidia_smi("name,memory.total,driver_version")
    gpu = "; ".join(f"{n} ({m} MiB, driver {d})" for n, m, d in gpus) if gpus else None
    if gpu is None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    cuda_probe = probe_cuda_provider(args.device) if args.device.startswith("cuda") else None
    engine, reason = args.engine, "asked for"
    if engine == "auto":
        if not args.device.startswith("cuda"):
            engine, reason = "paraformer-onnx", "on the CPU"
        elif cuda_probe == "CUDAExecutionProvider":
            engine, reason = "paraformer-onnx", "onnxruntime's CUDAExecutionProvider loads"
        else:
            engine = "paraformer"
            reason = (
                f"onnxruntime's CUDA provider does not run here ({cuda_probe}): the GPU"
                " steps run the PyTorch engine instead"
            )
    data: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "gpu": gpu,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "onnxruntime": ort.__version__,
        "providers": providers,
        "tensorrt_available": "TensorrtExecutionProvider" in providers,
        "cuda_provider_probe": cuda_probe,
        "funasr": _version("funasr"),
        "packages": {
            name: _version(name)
            for name in (
                "numpy",
                "onnx",
                "starlette",
                "uvicorn",
                "websockets",
                "anyio",
                "httpx",
                "uvloop",
                "prometheus-client",
                "pyyaml",
                "kaldi-native-fbank",
            )
        },
        "device": args.device,
        "engine": engine,
        "engine_reason": reason,
    }
    (args.work / "engine").write_text(engine)
    print(json.dumps(data, indent=1))
    return StepRecord(KEYS["env"], "ok", time.monotonic() - started, data=data)


def one_node_model() -> bytes:
    """y = x + x, serialized: the least graph a provider can be asked to run."""
    from onnx import TensorProto, helper

    x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in ("x", "y"))
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "probe", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8  # readable by older onnxruntime builds too
    data: bytes = model.SerializeToString()
    return data


def probe_cuda_provider(device: str) -> str:
    """What a one-node graph runs on when asked for the CUDA provider: onnxruntime falls
    back to the CPU, with a line in its log only, when the provider is listed but its CUDA
    libraries do not load. "CUDAExecutionProvider" where it really runs; else why not."""
    import numpy as np
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "not in onnxruntime's providers: the CPU build"
    options = ort.SessionOptions()
    options.log_severity_level = 3
    device_id = int(device.partition(":")[2] or 0)
    try:
        session = ort.InferenceSession(
            one_node_model(),
            options,
            providers=[("CUDAExecutionProvider", {"device_id": device_id}), "CPUExecutionProvider"],
        )
        session.run(None, {"x": np.ones(1, np.float32)})
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    used = session.get_providers()[0]
    return str(used) if used == "CUDAExecutionProvider" else f"fell back to {used}"


# -- 1: wheels ---------------------------------------------------------------------------


def wheels_step(args: argparse.Namespace) -> StepRecord:
    """There: install the carried wheels, then import each. Here (``--check``): pip's dry
    run of that install for CPython 3.12."""
    started = time.monotonic()
    directory: Path = args.dir
    found = device_wheels.wheels(directory)
    listing = [{"file": w.path.name, "mib": round(w.size / 2**20, 2)} for w in found]
    total = sum(w.size for w in found) / 2**20
    data: dict[str, Any] = {"wheels": listing, "mib": round(total, 2)}
    absent = device_wheels.missing(directory, device_wheels.pins() if args.check else None)
    if absent:
        note = (
            f"missing from {directory}: {', '.join(absent)} (bash bench/device/check.sh --wheels)"
        )
        return StepRecord(KEYS["wheels"], "failed", 0.0, data=data, note=note)
    command = f"{PYTHON} -m bench.device.wheels {'check' if args.check else 'install'}"
    if args.check:
        device_wheels.check(directory)
        result = f"{len(found)} wheels, {total:.1f} MiB: pip takes each for CPython 3.12"
        return StepRecord(
            KEYS["wheels"],
            "ok",
            time.monotonic() - started,
            [Row("wheels (dry run: pip's check for 3.12)", command, result)],
            data,
        )
    seconds = device_wheels.install(directory, args.target)
    environment = {**os.environ, "PYTHONPATH": str(args.target)}
    failed = []
    for module in device_wheels.IMPORTS:
        probe = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            env=environment,
            capture_output=True,
            text=True,
            cwd="/",
        )
        if probe.returncode != 0:
            failed.append(f"{module}: {probe.stderr.strip().splitlines()[-1:]}")
    data.update(install_s=round(seconds, 1), import_failures=failed)
    result = (
        f"{len(found)} wheels, {total:.1f} MiB, installed in {seconds:.0f} s;"
        f" {len(device_wheels.IMPORTS) - len(failed)}/{len(device_wheels.IMPORTS)} import"
    )
    status: Status = "failed" if failed else "ok"
    return StepRecord(
        KEYS["wheels"],
        status,
        time.monotonic() - started,
        [Row("wheels carried and installed", command, result)],
        data,
        "; ".join(failed),
    )


# -- 2: the CUDA tests -------------------------------------------------------------------


def cuda_tests_step(args: argparse.Namespace) -> StepRecord:
    """``tests/live/workers/test_cuda.py``, each test's outcome from pytest's JUnit XML."""
    started = time.monotonic()
    report = args.work / "cuda-tests.xml"
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
        *("tests/live/workers/test_cuda.py", f"--junitxml={report}"),
    ]
    shown = f"{PYTHON} -m pytest -q tests/live/workers/test_cuda.py"
    completed = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout
    )
    print(completed.stdout[-4000:], completed.stderr[-2000:], sep="\n")
    outcomes = []
    if report.is_file():
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            outcome = "passed"
            for kind in ("failure", "error", "skipped"):
                element = case.find(kind)
                if element is not None:
                    message = (element.get("message") or "").splitlines()[:1]
                    outcome = f"{kind}{' (' + message[0][:120] + ')' if message else ''}"
            outcomes.append(f"{case.get('name')}: {outcome}")
    tail = completed.stdout.strip().splitlines()[-1:] or ["no output"]
    status: Status = "ok" if completed.returncode == 0 else "failed"
    return StepRecord(
        KEYS["cuda-tests"],
        status,
        time.monotonic() - started,
        [Row("CUDA tests", shown, "; ".join(outcomes) or tail[0])],
        {"returncode": completed.returncode, "summary": tail[0], "tests": outcomes},
        "" if status == "ok" else tail[0],
    )
