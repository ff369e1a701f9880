"""sherpa-onnx's C++ streaming WebSocket server beside this gateway: the same random-weight
streaming Paraformer, the same probe, the same bar, in one command.

    .venv/bin/pip install sherpa-onnx==2.0.1 sherpa-onnx-bin==2.0.1
    python -m bench.peers.sherpa_onnx --precision int8 --streams 12,16,20

(``sherpa-onnx-bin`` puts ``sherpa-onnx-online-websocket-server`` in the environment's
``bin/``; ``sherpa-onnx`` brings ``sherpa-onnx-core``, its ONNX Runtime among them.)

1. The model (``--model``, ``synthetic:large`` by default: funasr's ``paraformer-zh-streaming``
   architecture) exported as sherpa-onnx reads it, once (``workers.models.export.sherpa``:
   funasr's own ONNX export with the encoder metadata sherpa needs; int8 as funasr's
   ``quantize=True``, dynamic).
2. sherpa's server on it, ``--num-work-threads=2 --num-threads=1`` (the best for 2 cores in
   an earlier run), its other flags at their defaults; the sweep of
   ``bench.load.capacity`` through it (``--protocol sherpa``: ``bench.load.sherpa_stream``
   says what differs in the measure): ``--seconds`` real-time streams, their starts over
   one chunk, at each ``--streams``; capacity is the most streams that all finish with p95
   per-chunk latency under ``--bar-ms``. Then its memory: RSS, PSS and peak RSS.
3. The gateway on the same model, ``ASR_MODEL=<model>;ASR_DEVICES=cpu,cpu;
   ASR_ENGINE=paraformer-onnx;ASR_ONNX_PRECISION=<precision>``, the same sweep in FunASR's
   protocol; its memory is the gateway's and its workers'.
4. One table, and its JSON, in ``--out``.

Loopback only: sherpa's server listens on every address (websocketpp's ``listen(tcp::v4(),
port)``; it has no flag to bind one). So the whole command runs in a network namespace of
its own holding ``lo`` alone (``bench.peers.namespace``: it re-executes itself under
``unshare --map-root-user --net``): both servers and the probe run in there, where nothing
outside can reach them.

What differs by design, not by this command: sherpa's Paraformer steps over 61 fbank
frames (10 LFR frames) with 5 LFR frames of left context and 3 of look-ahead (chunk
[5, 10, 3], its context cache starting as 8 zero frames), and its LFR stacking pads nothing
in front of the first fbank frame; FunASR's clients and our probe ask the gateway for
[5, 10, 5], funasr's streaming, whose LFR repeats the first fbank frame 3 times in front
and whose cache starts as 10 zero frames. So each of sherpa's steps waits for 35 ms more
audio than ours (``bench.load.sherpa_stream``) and looks 120 ms less far ahead. sherpa
decodes one stream at a time (its Paraformer's ``DecodeStreams`` loops over them), the
gateway batches. Its int8 is funasr's dynamic quantization (activation scales per call,
8-bit uint8 weights); the gateway's is static, calibrated, 7-bit. Its ONNX Runtime is its
own build (1.28.2 in 2.0.1; the gateway's is the venv's ``onnxruntime``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from types import TracebackType

from bench.common import procfs
from bench.common.net import free_port
from bench.common.report import header, row
from bench.load import capacity
from bench.load.sweep import Config, start_gateway
from bench.peers.namespace import interfaces, isolate
from shared.engines import Precision, Role
from shared.settings_table import MODEL_CACHE
from workers.models.export.sherpa import SherpaFiles, export
from workers.models.resolve import resolve_model

SERVER = "sherpa-onnx-online-websocket-server"
READY_TIMEOUT_S = 300.0  # the large fp32 graphs take a while to load on 2 cores
STOP_TIMEOUT_S = 10.0


def server_binary() -> Path | None:
    """Where ``sherpa-onnx-bin`` installs the server: this environment's scripts folder."""
    path = Path(sysconfig.get_path("scripts")) / SERVER
    return path if path.is_file() else None


class SherpaServer:
    """sherpa-onnx's online WebSocket server in a subprocess; ``close`` is safe twice."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log

    @classmethod
    def start(
        cls, files: SherpaFiles, log: Path, work_threads: int = 2, threads: int = 1
    ) -> SherpaServer:
        """Started on a free port, returned once it accepts connections."""
        binary = server_binary()
        if binary is None:
            raise SystemExit(f"no {SERVER}: pip install sherpa-onnx-bin==2.0.1")
        port = free_port()
        command = [
            str(binary),
            f"--port={port}",
            f"--num-work-threads={work_threads}",
            f"--num-threads={threads}",
            f"--paraformer-encoder={files.encoder}",
            f"--paraformer-decoder={files.decoder}",
            f"--tokens={files.tokens}",
            f"--log-file={os.devnull}",  # a copy of its output, else in ./log.txt
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        server = cls(process, port, log)
        try:
            server._wait_ready()
        except BaseException:
            server.close()
            raise
        return server

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def pid(self) -> int:
        return self.process.pid

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-2000:]
                raise SystemExit(f"{SERVER} did not start (exit {self.process.poll()}):\n{tail}")
            time.sleep(0.2)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()

    def __enter__(self) -> SherpaServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class Memory:
    """A server's processes together, after its sweep: their RSS counts a page they share
    once in each, their PSS divides it among them."""

    processes: int
    rss_mib: float
    pss_mib: float
    peak_rss_mib: float  # the sum of each process's VmHWM


def memory_of(pids: list[int]) -> Memory:
    return Memory(
        len(pids),
        sum(procfs.rss_mib(pid) for pid in pids),
        sum(procfs.pss_mib(pid) for pid in pids),
        sum(procfs.peak_rss_mib(pid) for pid in pids),
    )


@dataclass(frozen=True, slots=True)
class Side:
    server: str
    report: capacity.Report
    memory: Memory


def sweep(name: str, url: str, protocol: str, args: argparse.Namespace) -> capacity.Report:
    argv = ["--name", name, "--url", url, "--protocol", protocol, "--streams", args.streams]
    argv += ["--arrivals", args.arrivals, "--seconds", str(args.seconds)]
    argv += ["--ramp", str(args.ramp), "--bar-ms", str(args.bar_ms), "--out", str(args.out)]
    return capacity.run(capacity.parse_args(argv))


def run_sherpa(model_dir: Path, args: argparse.Namespace) -> Side:
    started = time.monotonic()
    files = export(model_dir, args.precision)
    print(f"export: {files.directory} ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    log = args.out / f"sherpa-onnx-{args.precision}.log"
    with SherpaServer.start(files, log, args.num_work_threads, args.num_threads) as server:
        print(
            f"sherpa-onnx server ready: pid {server.pid} on {server.url};"
            f" its network namespace holds {', '.join(interfaces(server.pid))}",
            file=sys.stderr,
            flush=True,
        )
        report = sweep(f"sherpa-onnx {args.precision}", server.url, "sherpa", args)
        return Side("sherpa-onnx", report, memory_of([server.pid]))


def run_gateway(args: argparse.Namespace) -> Side:
    env = {
        "ASR_MODEL": args.model,
        "ASR_DEVICES": "cpu,cpu",
        "ASR_ENGINE": "paraformer-onnx",
        "ASR_ONNX_PRECISION": args.precision,
    }
    name = f"gateway {args.precision}"
    gateway = start_gateway(Config(name, env))
    try:
        report = sweep(name, gateway.url, "funasr", args)
        return Side("this gateway", report, memory_of([gateway.pid, *procfs.workers(gateway.pid)]))
    finally:
        gateway.stop()


def markdown(sides: list[Side], args: argparse.Namespace) -> str:
    lines = header(
        "server", "arrivals", "streams", "errors", "p50 ms", "p95 ms", "p99 ms", "final p95 ms"
    )
    for side in sides:
        for p in side.report.points:
            latencies = (p.chunk_p50_ms, p.chunk_p95_ms, p.chunk_p99_ms, p.final_p95_ms)
            timed = [f"{ms:.0f}" for ms in latencies]
            lines.append(row(side.server, p.arrivals, p.streams, p.errors, *timed))
    lines += ["", *header("what", *(side.server for side in sides))]
    for arrivals in args.arrivals.split(","):
        cells = [str(side.report.capacity.get(arrivals, 0)) for side in sides]
        lines.append(row(f"capacity, {arrivals} (p95 < {args.bar_ms:.0f} ms)", *cells))
    lines.append(row("processes", *(side.memory.processes for side in sides)))
    for label, field in (
        ("RSS MiB after the sweep", "rss_mib"),
        ("PSS MiB after the sweep", "pss_mib"),
        ("peak RSS MiB (VmHWM)", "peak_rss_mib"),
    ):
        lines.append(row(label, *(f"{getattr(side.memory, field):.0f}" for side in sides)))
    return "\n".join(lines)


def versions() -> dict[str, str]:
    found = {}
    for package in ("sherpa-onnx-bin", "onnxruntime"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers.sherpa_onnx",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", default="synthetic:large", help="a streaming Paraformer")
    parser.add_argument("--precision", choices=["fp32", "int8"], default="int8")
    parser.add_argument("--servers", default="sherpa,gateway", help="which, in this order")
    parser.add_argument("--streams", default="12,16,20")
    parser.add_argument("--arrivals", default="uniform,random")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--ramp", type=float, default=capacity.CHUNK_S)
    parser.add_argument("--bar-ms", type=float, default=600.0)
    parser.add_argument("--num-work-threads", type=int, default=2, help="sherpa's")
    parser.add_argument("--num-threads", type=int, default=1, help="sherpa's, per graph call")
    parser.add_argument("--out", type=Path, default=Path("bench/results/peers"))
    args = parser.parse_args(argv)
    unknown = set(args.servers.split(",")) - {"sherpa", "gateway"}
    if unknown:
        parser.error(f"--servers: sherpa and/or gateway, not {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    isolate("bench.peers.sherpa_onnx", argv)
    args.out.mkdir(parents=True, exist_ok=True)
    precision: Precision = args.precision
    # Where the gateway it starts finds the model too: ASR_MODEL_CACHE, or its default.
    cache = str(Path(MODEL_CACHE.read(os.environ)).expanduser())
    resolved = resolve_model(args.model, cache, Role.STREAMING)
    assert resolved.model_dir is not None, "a streaming Paraformer has a directory"
    sides = []
    for server in args.servers.split(","):
        if server == "sherpa":
            sides.append(run_sherpa(Path(resolved.model_dir), args))
        else:
            sides.append(run_gateway(args))
    table = markdown(sides, args)
    slug = f"sherpa-onnx-{precision}"
    payload = {
        "args": vars(args) | {"out": str(args.out)},
        "versions": versions(),
        "sides": [asdict(side) for side in sides],
    }
    (args.out / f"{slug}.json").write_text(json.dumps(payload, indent=1, default=str))
    (args.out / f"{slug}.md").write_text(table + "\n")
    print(f"## sherpa-onnx against this gateway: {args.model}, {precision}\n\n{table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
