"""The GPU machine's checks, one subcommand per step; ``bench/device_check.sh`` runs them.

Each subcommand writes its record into ``--work`` (``bench.device_records``) and ``table``
makes the one Markdown table of them all. Heavy imports (torch, funasr, onnxruntime) stay
inside the steps: ``wheels`` runs before funasr is installed, and ``fail`` and ``table``
must work whatever broke.

    python -m bench.device_check env --device cuda:0
    python -m bench.device_check fidelity --model DIR --device cuda:0 --streams 16
    python -m bench.device_check table --out OUT

Steps (the numbers of the table): 1 wheels, 2 cuda-tests, 3 model and fidelity (fp32,
int8), 4 placement and 5 sweep (``bench.device_gateway``), 5 ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import FrameType
from typing import Any

from bench import device_wheels
from bench.device_gateway import add_arguments, gateway_step, nvidia_smi
from bench.device_records import (
    KEYS,
    PYTHON,
    ROOT,
    Row,
    Status,
    StepRecord,
    read_records,
    write_record,
    write_table,
)


def _stop_on_sigterm() -> None:
    """``timeout`` sends SIGTERM: leave through ``finally`` (records written, servers
    stopped) rather than die where we stand."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


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
            f"missing from {directory}: {', '.join(absent)} (bash bench/device_check.sh --wheels)"
        )
        return StepRecord(KEYS["wheels"], "failed", 0.0, data=data, note=note)
    command = f"{PYTHON} -m bench.device_wheels {'check' if args.check else 'install'}"
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


# -- 3: the model and the engines' fidelity ----------------------------------------------


def model_step(args: argparse.Namespace) -> StepRecord:
    """Build the synthetic streaming Paraformer (here: the large one is 0.9 GB, never
    carried) and, for the ONNX engine, its fp32 export."""
    started = time.monotonic()
    from workers.models.resolve import ensure_synthetic

    path = ensure_synthetic(args.models, "streaming", args.size)
    built = time.monotonic() - started
    (args.work / "model_dir").write_text(str(path))
    command = f"{PYTHON} -m workers.models.synthetic {path} --kind streaming --size {args.size}"
    result = f"built in {built:.0f} s"
    exported = None
    status: Status = "ok"
    note = ""
    if args.export:
        from workers.models.export import export

        began = time.monotonic()
        command += f" && {PYTHON} -m workers.models.export {path}"
        try:
            export(path, int8=False, threads=args.threads)
            exported = time.monotonic() - began
            result += f", exported to ONNX fp32 in {exported:.0f} s"
        except Exception as exc:
            # The GPU is still worth measuring: the later steps take the PyTorch engine.
            (args.work / "engine").write_text("paraformer")
            status = "failed"
            note = f"ONNX export: {type(exc).__name__}: {exc}"[:400]
            note += "; the later steps run the PyTorch engine"
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**30
    data = {
        "model_dir": str(path),
        "model": f"synthetic streaming {args.size} (random weights)",
        "build_s": round(built, 1),
        "export_s": None if exported is None else round(exported, 1),
        "gib_on_disk": round(size, 2),
    }
    return StepRecord(
        KEYS["model"],
        status,
        time.monotonic() - started,
        [Row("synthetic model", command, f"{result}; {size:.2f} GiB on disk")],
        data,
        note,
    )


def compare(ours: list[list[str]], reference: list[list[str]]) -> tuple[int, int, int]:
    """Streams whose every chunk's text is equal; chunks equal; chunks in all."""
    streams = chunks = total = 0
    for mine, theirs in zip(ours, reference, strict=True):
        equal = [a == b for a, b in zip(mine, theirs, strict=False)]
        same_count = len(mine) == len(theirs)
        streams += same_count and all(equal)
        chunks += sum(equal)
        total += len(theirs)
    return streams, chunks, total


def fidelity_step(args: argparse.Namespace) -> StepRecord:
    """The engine's text on ``--device`` against the CPU's, chunk for chunk, on N streams of
    different lengths (``bench.onnx_fidelity``'s audio): the ONNX engine batched as the
    worker runs it; the PyTorch engine (the fallback) one stream at a time, as it runs."""
    started = time.monotonic()
    from bench.common.audio import chunks_of_tone
    from bench.onnx_fidelity import alone, batched

    key = KEYS[f"fidelity-{args.precision}"]
    model_dir = Path(args.model)
    audios = [chunks_of_tone(100 + s) for s in range(args.streams)]
    cpu_engine: Any
    device_engine: Any
    data: dict[str, Any] = {"engine": args.engine, "precision": args.precision}
    command = (
        f"{PYTHON} -m bench.device_check fidelity --model {model_dir} --device {args.device}"
        f" --engine {args.engine} --precision {args.precision} --streams {args.streams}"
    )
    if args.engine == "paraformer-onnx":
        from workers.engines.paraformer_onnx import ParaformerOnnxEngine

        if args.precision == "int8":
            from workers.models.export import export

            began = time.monotonic()
            export(model_dir, int8=True)
            data["int8_export_s"] = round(time.monotonic() - began, 1)
        cpu_engine = ParaformerOnnxEngine(model_dir, args.precision, "cpu", args.threads)
        try:
            device_engine = ParaformerOnnxEngine(
                model_dir, args.precision, args.device, args.threads
            )
        except Exception as exc:
            note = f"{args.precision} on {args.device}: {type(exc).__name__}: {exc}"
            return StepRecord(
                key,
                "failed",
                time.monotonic() - started,
                [Row("fidelity", command, "")],
                data,
                note,
            )
        # Which providers the sessions hold, in order: what ran (a node the first cannot run
        # falls to the next). The engine keeps its sessions private; a bench may look.
        data["providers_used"] = device_engine._encoder.get_providers()
        data["provider"] = data["providers_used"][0]
        if args.device.startswith("cuda") and data["provider"] == "CPUExecutionProvider":
            note = f"asked for {args.device}, onnxruntime ran on the CPU (its CUDA libraries?)"
            row = Row("fidelity", command, "")
            return StepRecord(key, "failed", time.monotonic() - started, [row], data, note)

        def decode(engine: Any) -> list[list[str]]:
            return batched(engine, audios)
    else:
        from dataclasses import replace

        from shared.engines import EngineName
        from shared.messages import EngineSpec
        from workers.engines.paraformer import ParaformerStreamingEngine

        spec = EngineSpec(EngineName.PARAFORMER, "cpu", str(model_dir), threads=args.threads)
        cpu_engine = ParaformerStreamingEngine.load(spec)
        device_engine = ParaformerStreamingEngine.load(replace(spec, device=args.device))
        data["provider"] = f"torch {args.device}"

        def decode(engine: Any) -> list[list[str]]:
            return [alone(engine, audio, s) for s, audio in enumerate(audios)]

    timings = {}
    began = time.monotonic()
    reference = decode(cpu_engine)
    timings["cpu_s"] = time.monotonic() - began
    began = time.monotonic()
    first = decode(device_engine)  # also the warm-up: each new shape's first run is slow
    timings["device_first_s"] = time.monotonic() - began
    began = time.monotonic()
    again = decode(device_engine)
    timings["device_s"] = time.monotonic() - began
    streams, chunks, total = compare(again, reference)
    repeat_streams, _, _ = compare(again, first)
    tokens = sum(len("".join(t)) for t in reference)
    data.update(
        streams=args.streams,
        chunks=total,
        chunks_equal=chunks,
        streams_equal=streams,
        repeat_equal=repeat_streams == args.streams,
        tokens=tokens,
        **{k: round(v, 3) for k, v in timings.items()},
        differing=[
            {"stream": s, "chunk": k, "cpu": b, "device": a}
            for s, (mine, theirs) in enumerate(zip(again, reference, strict=True))
            for k, (a, b) in enumerate(zip(mine, theirs, strict=False))
            if a != b
        ][:8],
    )
    result = (
        f"{streams}/{args.streams} streams and {chunks}/{total} chunks equal to the CPU's"
        f" ({tokens} characters); {args.device} again: "
        f"{'same text' if data['repeat_equal'] else 'text differs from its first run'};"
        f" {timings['device_s'] / total * 1e3:.1f} ms per chunk on {args.device},"
        f" {timings['cpu_s'] / total * 1e3:.1f} on the CPU (threads: {args.threads});"
        f" ran on {data['provider']}"
    )
    label = f"fidelity {args.engine} {args.precision}, {args.device} vs CPU"
    return StepRecord(
        key, "ok", time.monotonic() - started, [Row(label, command, result, args.streams)], data
    )


# -- 5: the raw ceiling ------------------------------------------------------------------


def ceiling_step(args: argparse.Namespace) -> StepRecord:
    """``bench.raw_ceiling`` on the device, one run per ``PxS`` point (P processes, S streams
    stepped together), each in its own process and time limit."""
    started = time.monotonic()
    rows: list[Row] = []
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    look_back = "0,0" if args.engine == "paraformer-onnx" else "4,1"
    record = StepRecord(KEYS["ceiling"], "ok", 0.0, rows, {"runs": runs})
    for point in args.points.split(","):
        processes, streams = (int(v) for v in point.split("x"))
        left = args.deadline - time.time()
        if left < args.seconds + 40:
            skipped.append(point)
            continue
        flags = [
            *("--model", str(args.model), "--engine", args.engine, "--device", args.device),
            *("--streams", str(streams), "--processes", str(processes)),
            *("--seconds", str(args.seconds), "--repeat", "1", "--look-back", look_back),
        ]
        shown = f"{PYTHON} -m bench.raw_ceiling {' '.join(flags)}"
        try:
            completed = subprocess.run(
                [sys.executable, "-m", "bench.raw_ceiling", *flags],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=min(left - 10, args.seconds + 180),
            )
        except subprocess.TimeoutExpired:
            rows.append(Row("raw ceiling", shown, "timed out", streams * processes))
            continue
        measured = [
            json.loads(line)
            for line in completed.stderr.splitlines()
            if line.startswith("{") and '"realtime_streams"' in line
        ]
        if completed.returncode != 0 or not measured:
            last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append(Row("raw ceiling", shown, f"failed: {last[:200]}", streams * processes))
            continue
        run = measured[-1]
        runs.append(run)
        rows.append(
            Row(
                f"raw ceiling, {processes} process{'es' if processes > 1 else ''}"
                f" x batch {streams}",
                shown,
                f"{run['realtime_streams']:.1f} real-time streams;"
                f" {run['chunk_ms_mean']:.2f} ms per stream-chunk;"
                f" RSS {run['rss_mib_max']:.0f} MiB per process",
                streams * processes,
            )
        )
        write_record(args.work, record)
    note = f"not run, out of time: {', '.join(skipped)}" if skipped else ""
    status: Status = "ok" if runs else "failed"
    return StepRecord(
        KEYS["ceiling"], status, time.monotonic() - started, rows, {"runs": runs}, note
    )


# -- the shell's helpers -----------------------------------------------------------------


def fail_step(args: argparse.Namespace) -> StepRecord:
    """The record of a step the shell had to stop or skip; rows it wrote stay."""
    key = KEYS[args.step]
    existing = next((r for r in read_records(args.work) if r.key == key), None)
    if existing is not None and existing.status != "ok":
        return existing
    rows = existing.rows if existing else []
    data = existing.data if existing else {}
    seconds = existing.seconds if existing else 0.0
    return StepRecord(key, args.status, seconds, rows, data, args.note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.device_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    steps = parser.add_subparsers(dest="step", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--work", type=Path, default=Path("/tmp/device-check"))
    common.add_argument("--device", default="cuda:0")
    common.add_argument("--model", type=Path)
    common.add_argument("--threads", type=int, default=1)
    common.add_argument("--deadline", type=float, default=float("inf"), help="epoch seconds")

    engines = ["paraformer-onnx", "paraformer"]
    env = steps.add_parser("env", parents=[common])
    env.add_argument("--engine", choices=["auto", *engines], default="auto")
    wheels = steps.add_parser("wheels", parents=[common])
    wheels.add_argument("--dir", type=Path, default=device_wheels.DEFAULT_DIR)
    wheels.add_argument("--target", type=Path, default=Path("/tmp/site"))
    wheels.add_argument("--check", action="store_true", help="pip's dry run, no install")
    cuda = steps.add_parser("cuda-tests", parents=[common])
    cuda.add_argument("--timeout", type=float, default=300.0)
    model = steps.add_parser("model", parents=[common])
    model.add_argument("--size", choices=["tiny", "large"], default="large")
    model.add_argument("--models", type=Path, default=Path("/tmp/asr-models"))
    model.add_argument("--export", action=argparse.BooleanOptionalAction, default=True)
    fidelity = steps.add_parser("fidelity", parents=[common])
    fidelity.add_argument("--engine", choices=engines, default="paraformer-onnx")
    fidelity.add_argument("--precision", choices=["fp32", "int8"], default="fp32")
    fidelity.add_argument("--streams", type=int, default=16)
    ceiling = steps.add_parser("ceiling", parents=[common])
    ceiling.add_argument("--engine", choices=engines, default="paraformer-onnx")
    ceiling.add_argument("--points", default="1x16,1x32,1x64,2x64", help="PROCESSESxSTREAMS")
    ceiling.add_argument("--seconds", type=float, default=10.0)
    gateway = steps.add_parser("gateway", parents=[common])
    gateway.add_argument("--engine", choices=engines, default="paraformer-onnx")
    add_arguments(gateway)
    fail = steps.add_parser("fail", parents=[common])
    fail.add_argument("--for", dest="step_name", required=True, choices=sorted(KEYS))
    fail.add_argument("--status", choices=["failed", "skipped"], default="failed")
    fail.add_argument("--note", default="")
    table = steps.add_parser("table", parents=[common])
    table.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.step == "table":
        print(write_table(args.work, args.out))
        return 0
    if args.step == "fail":
        args.step = args.step_name
        write_record(args.work, fail_step(args))
        return 0
    if args.step == "gateway":
        return gateway_step(args)
    run = {
        "env": env_step,
        "wheels": wheels_step,
        "cuda-tests": cuda_tests_step,
        "model": model_step,
        "fidelity": fidelity_step,
        "ceiling": ceiling_step,
    }[args.step]
    record = run(args)
    write_record(args.work, record)
    for row in record.rows:
        print(f"{row.check}: {row.result}")
    if record.note:
        print(f"{record.status}: {record.note}", file=sys.stderr)
    return 0 if record.status == "ok" else 1


if __name__ == "__main__":
    _stop_on_sigterm()
    sys.exit(main())
