"""Fixtures of the tests of FunASR's own clients."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

VENDOR = Path(__file__).resolve().parent / "vendor" / "funasr_html5"


class VendoredFiles(SimpleHTTPRequestHandler):
    """The vendored page's files at ``/static/``, as they are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, directory=str(VENDOR), **kwargs)

    def translate_path(self, path: str) -> str:
        return super().translate_path(path.removeprefix("/static"))

    def log_message(self, format: str, *args: Any) -> None:
        pass  # pytest shows the browser's side


@pytest.fixture(scope="module")
def static() -> Iterator[str]:
    """The base URL of a static file server for the vendored page."""
    with ThreadingHTTPServer(("127.0.0.1", 0), VendoredFiles) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, name="funasr-html5-static")
        thread.start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}"
        finally:
            httpd.shutdown()
            thread.join()
