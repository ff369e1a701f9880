"""Steps 0 to 2 of ``bench/device/check.sh``: what the machine is and has. 0 ``env``: the
versions, the GPU, onnxruntime's providers, and the engine the later steps use; 1
``wheels``: the carried wheels installed (there) or pip's dry run of that (here), then
every module the steps use imported; 2 ``cuda-tests``: ``tests/live/workers/test_cuda.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.device import wheels as device_wheels
from bench.device.placement import STAND_IN, nvidia_smi
from bench.device.records import KEYS, PYTHON, Row, Status, StepRecord
from bench.device.requirements import IMPORTS


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


# -- 0: the environment ------------------------------------------------------------------


def env_step(args: argparse.Namespace) -> StepRecord:
    """Versions, the GPU, onnxruntime's providers, and the engine the GPU steps use: the
    ONNX engine where onnxruntime's CUDA provider really runs a graph, else PyTorch's. That
    is a fallback, and so a failure: its row says why, and the steps after it measure the
    PyTorch engine, each row saying so."""
    started = time.monotonic()
    import onnxruntime as ort
    import torch

    providers = list(ort.get_available_providers())
    gpus = nvidia_smi("name,memory.total,driver_version")
    gpu = "; ".join(f"{n} ({m} MiB, driver {d})" for n, m, d in gpus) if gpus else None
    if gpu is None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    on_gpu = args.device.startswith("cuda")
    cuda_probe = probe_cuda_provider(args.device) if on_gpu else None
    engine, reason, fallback = args.engine, "asked for", ""
    if engine == "auto":
        if not on_gpu:
            engine, reason = "paraformer-onnx", STAND_IN if args.dry_run else "on the CPU"
        elif cuda_probe == "CUDAExecutionProvider":
            engine, reason = "paraformer-onnx", "onnxruntime's CUDAExecutionProvider runs"
        else:
            engine = "paraformer"
            fallback = f"onnxruntime's CUDA provider does not run here ({cuda_probe})"
            reason = f"{fallback}: the GPU steps run the PyTorch engine instead"
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
        "dry_run": args.dry_run,
        "engine": engine,
        "engine_reason": reason,
        "fallback": fallback,
    }
    (args.work / "engine").write_text(engine)
    print(json.dumps(data, indent=1))
    rows = [Row("engine", "", f"{engine} on {args.device}: {reason}")]
    status: Status = "failed" if fallback else "ok"
    note = f"the ONNX engine cannot run on {args.device}: {fallback}" if fallback else ""
    return StepRecord(KEYS["env"], status, time.monotonic() - started, rows, data, note)


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


def probe_imports(
    modules: tuple[str, ...],
    distributions: list[str],
    env: dict[str, str],
    timeout: float = 120.0,
) -> dict[str, list[str]]:
    """``bench.device.imports`` in a fresh interpreter with ``env``: the modules that do not
    import, and the carried distributions' requirements that nothing installed meets."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "imports.json"
        try:
            subprocess.run(
                [
                    *(sys.executable, "-m", "bench.device.imports", "--report", str(report)),
                    *("--distributions", ",".join(distributions), *modules),
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,  # funasr's chatter; the report has what counts
                stderr=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"failed_imports": [f"the imports took over {timeout:.0f} s"], "unmet": []}
        if not report.is_file():
            return {"failed_imports": ["the import check itself crashed"], "unmet": []}
        found: dict[str, list[str]] = json.loads(report.read_text())
        return found


def wheels_step(args: argparse.Namespace) -> StepRecord:
    """There: install the carried wheels; here (``--check``): pip's dry run of that for
    CPython 3.12. Then, both: no wheel's requirement left unmet, and every module the steps
    use imports (``bench.device.requirements.IMPORTS``), each failure named."""
    started = time.monotonic()
    directory: Path = args.dir
    found = device_wheels.wheels(directory)
    listing = [{"file": w.path.name, "mib": round(w.size / 2**20, 2)} for w in found]
    total = sum(w.size for w in found) / 2**20
    data: dict[str, Any] = {"wheels": listing, "mib": round(total, 2)}
    problems = device_wheels.problems(directory, here=args.check)
    if not found or problems:
        why = "; ".join(problems) or "no wheels"
        note = f"{directory}: {why} (bash bench/device/check.sh --wheels)"
        return StepRecord(KEYS["wheels"], "failed", 0.0, data=data, note=note)
    environment = dict(os.environ)
    if args.check:
        device_wheels.check(directory)
        done = f"{len(found)} wheels, {total:.1f} MiB: pip takes each for CPython 3.12"
        check = "wheels (dry run: pip's check for 3.12, imports here)"
    else:
        seconds = device_wheels.install(directory, args.target)
        environment["PYTHONPATH"] = str(args.target)
        data["install_s"] = round(seconds, 1)
        done = f"{len(found)} wheels, {total:.1f} MiB, installed in {seconds:.0f} s"
        check = "wheels carried and installed"
    modules = (*IMPORTS, *args.also_import)
    left = max(5.0, args.deadline - time.time() - 2)
    probed = probe_imports(modules, [w.name for w in found], environment, min(left, 120.0))
    failed, unmet = probed["failed_imports"], probed["unmet"]
    data.update(imports=list(modules), import_failures=failed, unmet=unmet)
    result = f"{done}; {len(modules) - len(failed)}/{len(modules)} modules import"
    result += f", {len(unmet)} requirements unmet" if unmet else ", every requirement met"
    action = "check" if args.check else "install"
    command = f"{PYTHON} -m bench.device.wheels {action} && {PYTHON} -m bench.device.imports"
    status: Status = "failed" if failed or unmet else "ok"
    return StepRecord(
        KEYS["wheels"],
        status,
        time.monotonic() - started,
        [Row(check, command, result)],
        data,
        "; ".join([*failed, *unmet]),
    )


# -- 2: the CUDA tests -------------------------------------------------------------------


# The plugins the tests need, named: pyproject's addopts (-n, --dist) and its `timeout` ini
# option are errors without xdist and pytest-timeout, and the tests are anyio's. The
# image's own plugins (pytest-cov, pytest-mock, ...) are not loaded: not ours to depend on.
PYTEST_PLUGINS = ("xdist.plugin", "pytest_timeout", "anyio.pytest_plugin")
CUDA_TESTS = "tests/live/workers/test_cuda.py"


def test_outcomes(report: Path) -> list[tuple[str, str, str]]:
    """Each test's name, outcome (passed, failure, error, skipped) and message, from
    pytest's JUnit XML."""
    outcomes = []
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for kind in ("failure", "error", "skipped"):
            element = case.find(kind)
            if element is not None:
                outcome = kind
                message = ((element.get("message") or "").splitlines() or [""])[0][:160]
        outcomes.append((case.get("name") or "?", outcome, message))
    return outcomes


def unproven_on_gpu(outcomes: list[tuple[str, str, str]]) -> list[str]:
    """The tests that did not prove anything on the GPU machine: failed, or skipped for a
    reason other than checking a refusal that only a machine without CUDA can see (a GPU
    test skipped there is a GPU not found, or onnxruntime without CUDA)."""
    return [
        f"{name}: {outcome}{f' ({message})' if message else ''}"
        for name, outcome, message in outcomes
        if outcome != "passed" and not (outcome == "skipped" and "refusal" in message)
    ]


def cuda_tests_step(args: argparse.Namespace) -> StepRecord:
    """``tests/live/workers/test_cuda.py`` in one process (``-n 0``: two tests do not pay
    for xdist's workers), each test's outcome from pytest's JUnit XML. On the GPU machine a
    GPU test that skips fails the step; in the dry run they skip, and the row says so."""
    started = time.monotonic()
    report = args.work / "cuda-tests.xml"
    report.unlink(missing_ok=True)
    plugins = [flag for plugin in PYTEST_PLUGINS for flag in ("-p", plugin)]
    command = [
        *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins, "-n", "0"),
        *(CUDA_TESTS, f"--junitxml={report}"),
    ]
    shown = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PYTHON} -m pytest -q {' '.join(plugins)} -n 0"
    shown += f" {CUDA_TESTS}"
    environment = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    limit = max(5.0, min(args.timeout, args.deadline - time.time() - 3))
    try:
        completed = subprocess.run(
            command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=limit
        )
    except subprocess.TimeoutExpired:
        note = f"pytest ran past its {limit:.0f} s"
        row = Row("CUDA tests", shown, "")
        return StepRecord(KEYS["cuda-tests"], "failed", time.monotonic() - started, [row], {}, note)
    print(completed.stdout[-4000:], completed.stderr[-2000:], sep="\n")
    outcomes = test_outcomes(report) if report.is_file() else []
    tail = (completed.stdout.strip().splitlines() or ["no output"])[-1]
    said = [f"{n}: {o}{f' ({m})' if m else ''}" for n, o, m in outcomes]
    result = "; ".join(said) or tail
    if args.dry_run:
        problems = [f"{name}: {outcome}" for name, outcome, _ in outcomes if outcome != "passed"]
        problems = [p for p in problems if not p.endswith("skipped")]
        result += f"; {STAND_IN}: the GPU tests skip"
    else:
        problems = unproven_on_gpu(outcomes)
    if completed.returncode not in (0, 5) and not problems:
        problems = [f"pytest exit code {completed.returncode}: {tail}"]
    if not outcomes:
        problems = problems or [f"no test ran: {tail}"]
    status: Status = "failed" if problems else "ok"
    return StepRecord(
        KEYS["cuda-tests"],
        status,
        time.monotonic() - started,
        [Row("CUDA tests", shown, result)],
        {"returncode": completed.returncode, "summary": tail, "tests": said},
        "; ".join(problems),
    )
