"""Does the gateway give back what an upload took? Large uploads one after the other to a
real uvicorn, and the gateway's RSS after each.

    python -m bench.upload_memory [--rounds 6] [--mib 50] [--path /v1/transcribe]
        [--http httptools|h11] [--loop auto|asyncio|uvloop]

Starts ``uvicorn gateway.app:app`` (checksum engine, one CPU worker), POSTs one multipart
WAV (16 kHz PCM16, ``--mib`` MiB, Content-Length declared) per round on a fresh connection,
and prints the gateway's VmRSS over its start after each answer (1 s later).

Before dc47ef6 every upload left about its own size in the gateway for good (the multipart
reader and its parser were a reference cycle, and the latency-tuned collector all but never
runs a full collection): +50 MiB a 50 MiB upload, no plateau in 40 uploads (+2.0 GiB), on
both endpoints, both HTTP implementations and both loops; +56 MiB flat since (the first
upload's buffers, kept by the allocator).
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request


def wav(data_bytes: int) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, 1, 16000, 32000, 2, 16)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", data_bytes)
    header = b"RIFF" + struct.pack("<I", 4 + len(chunks) + data_bytes) + b"WAVE" + chunks
    return header + bytes(range(256)) * (data_bytes // 256) + bytes(data_bytes % 256)


def request(path: str, file_bytes: int) -> bytes:
    fields = b""
    if path == "/v1/audio/transcriptions":
        fields = b'--B\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
    body = (
        fields
        + b'--B\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
        + wav(file_bytes - 44)
        + b"\r\n--B--\r\n"
    )
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(body)}\r\n"
        "content-type: multipart/form-data; boundary=B\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--mib", type=float, default=50)
    parser.add_argument("--path", default="/v1/transcribe")
    parser.add_argument("--http", default="auto")
    parser.add_argument("--loop", default="auto")
    args = parser.parse_args()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **os.environ,
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_MAX_SESSION_SECONDS": "3600",
        "ASR_UPLOAD_TIMEOUT": "60",
    }
    command = [sys.executable, "-m", "uvicorn", "gateway.app:app", "--port", str(port)]
    command += ["--http", args.http, "--loop", args.loop, "--log-level", "warning"]
    server = subprocess.Popen(command, env=env)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.2)
        data = request(args.path, int(args.mib * 2**20))
        base = rss_mib(server.pid)
        for number in range(1, args.rounds + 1):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(data)
                status = sock.recv(64).split(b"\r\n")[0].decode()
            time.sleep(1.0)
            grown = rss_mib(server.pid) - base
            print(f"upload {number}: {status}; gateway RSS +{grown:.0f} MiB", flush=True)
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
