"""The browser page's files (``gateway/static``), read once and served from memory.

Serving a file opens it, and a request may come in on the last free descriptor (the table
filling up: thousands of idle connections, a leak): Starlette's ``FileResponse`` then
fails after its headers are sent, and ``mimetypes`` reads ``/etc/mime.types`` on its first
use, so the client got a 500 or a cut body. The files are small (~32 KB together); held
in memory, a request whose connection was accepted always gets them.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response


@dataclass(frozen=True, slots=True)
class PageFile:
    body: bytes
    media_type: str
    etag: str


class PageFiles:
    """Every file of ``directory`` (not its subdirectories), by name."""

    def __init__(self, directory: Path) -> None:
        self._files: dict[str, PageFile] = {}
        for path in sorted(directory.iterdir()):
            if path.is_file():
                body = path.read_bytes()
                media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
                self._files[path.name] = PageFile(body, media_type, etag)

    def response(self, name: str, request: Request) -> Response:
        file = self._files.get(name)
        if file is None:
            return PlainTextResponse("Not Found", 404)
        headers = {"ETag": file.etag, "Cache-Control": "no-cache"}
        if file.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(file.body, media_type=file.media_type, headers=headers)
