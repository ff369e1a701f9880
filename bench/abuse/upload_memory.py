"""Does the gateway give back what an upload took? Large uploads one after the other to a
real uvicorn, and the gateway's RSS after each.

    python -m bench.abuse.upload_memory [--rounds 6] [--mib 50] [--path /v1/transcribe]
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
import socket
import time

from bench.common.audio import wav_header
from bench.common.gateway import QUIET, start
from bench.common.procfs import rss_mib


def wav(data_bytes: int) -> bytes:
    return (
        wav_header(data_bytes) + bytes(range(256)) * (data_bytes // 256) + bytes(data_bytes % 256)
    )


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--mib", type=float, default=50)
    parser.add_argument("--path", default="/v1/transcribe")
    parser.add_argument("--http", default="auto")
    parser.add_argument("--loop", default="auto")
    args = parser.parse_args()
    env = {
        "ASR_MODEL": "checksum",
        "ASR_DEVICES": "cpu",
        "ASR_MAX_SESSION_SECONDS": "3600",
        "ASR_UPLOAD_TIMEOUT": "60",
    }
    with start(env, options=["--http", args.http, "--loop", args.loop, *QUIET]) as server:
        data = request(args.path, int(args.mib * 2**20))
        base = rss_mib(server.pid)
        for number in range(1, args.rounds + 1):
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(data)
                status = sock.recv(64).split(b"\r\n")[0].decode()
            time.sleep(1.0)
            grown = rss_mib(server.pid) - base
            print(f"upload {number}: {status}; gateway RSS +{grown:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
