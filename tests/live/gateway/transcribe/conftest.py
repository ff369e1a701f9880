"""The app the file-transcription tests share (one start for the package), and a file
server for the URL tests."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from gateway.app import create_app
from tests.helpers.loops import GatewayClient
from tests.helpers.transcription import SETTINGS
from tests.helpers.wav import speech, wav_bytes


@pytest.fixture(scope="package")
def client() -> Iterator[TestClient]:
    with GatewayClient(create_app(SETTINGS)) as client:
        yield client


class _WavHandler(http.server.BaseHTTPRequestHandler):
    payload = wav_bytes(speech(1.5))

    def do_GET(self) -> None:
        if self.path == "/a.wav":
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.payload)))
            self.end_headers()
            self.wfile.write(self.payload)
        elif self.path == "/bad-length":
            self.send_response(200)
            self.send_header("Content-Length", "12x")
            self.end_headers()
            self.wfile.write(self.payload)
        elif self.path == "/chunked":
            self.protocol_version = "HTTP/1.1"
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(self.payload), 4096):
                piece = self.payload[start : start + 4096]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/truncated":
            # Half the body it declares, then the connection closed: a server gone mid-file.
            self.send_response(200)
            self.send_header("Content-Length", str(len(self.payload)))
            self.end_headers()
            self.wfile.write(self.payload[: len(self.payload) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        elif self.path == "/slow-chunked":
            # The whole file, in pieces with pauses: reads that find only part of it.
            self.protocol_version = "HTTP/1.1"
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(self.payload), 8192):
                piece = self.payload[start : start + 8192]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
                time.sleep(0.01)
            self.wfile.write(b"0\r\n\r\n")
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/a.wav")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="package")
def file_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WavHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
