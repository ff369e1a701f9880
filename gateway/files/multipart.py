"""Request bodies of ``POST /v1/transcribe``, read with a byte cap as they arrive.

A declared ``Content-Length`` is checked before anything is read (over the cap: 413 at
once; not a number: 400). The body is then consumed chunk by chunk with a running count
that stops at the cap (413), so memory stays bounded by the cap and nothing is spooled to
disk: a multipart form is parsed incrementally (``python_multipart``, as Starlette does) and
its ``file`` part kept in memory, up to ``ASR_TRANSCRIBE_MAX_BYTES``; the text fields the
caller names (``/v1/transcribe``: ``hotwords``; OpenAI's endpoint: ``model``,
``response_format``, ``timestamp_granularities[]``, ...) up to ``FIELD_MAX_BYTES`` each, every
value of a repeated one kept in order; other fields are read past and dropped; at most
``max_parts`` parts (``MAX_PARTS`` unless the caller says otherwise). A field the caller
caps (``FieldCap``: OpenAI's ``known_speaker_references[]``, clips in base64) keeps its first
values up to the cap's size each, and the form's limit grows by what they may take; a value
past the cap is read past and counted (``Form.dropped``), not refused: the endpoint refuses
it only where it would use it.

A kept field that is a file is a 400 (``bad_form``); one that is not UTF-8, a 400 whose
reason is ``bad_<name>`` (``[]`` left off: ``bad_hotwords``, ``bad_include``): the names are
the caller's few, so the metric's labels stay few.

``FormReader`` is sans-I/O: chunks in, a ``Form`` out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field

import anyio
from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import parse_options_header

from gateway.files.errors import TranscribeError, too_large

JSON_MAX_BYTES = 64 << 10
JSON_WHY = "a JSON body takes at most 64 KiB"
FORM_WHY = "ASR_TRANSCRIBE_MAX_BYTES and 256 KiB for the form's fields"
FIELD_MAX_BYTES = 64 << 10  # a text field (hotwords: 16 KiB of words, plus JSON weights)
FORM_SLACK_BYTES = 256 << 10  # a form's boundaries, part headers and text fields
MAX_PARTS = 8
# What /v1/transcribe's form keeps.
TEXT_FIELDS = frozenset({"hotwords", "model", "itn", "language", "speakers", "spk"})


def check_declared_length(headers: Mapping[str, str], limit: int, what: str, why: str) -> None:
    """Refuse at once a body whose ``Content-Length`` is over ``limit`` (413) or malformed."""
    declared = headers.get("content-length")
    if declared is None:
        return  # chunked: the running count in ``read_capped`` / ``read_form`` stops it
    text = declared.strip()
    if not (text.isascii() and text.isdigit()):
        raise TranscribeError(400, "bad_length", f"the Content-Length {declared!r} is malformed")
    if int(text) > limit:
        raise too_large(limit, what, why)


async def read_capped(chunks: AsyncIterator[bytes], limit: int, what: str, why: str) -> bytes:
    """The whole body, refused with 413 as soon as it passes ``limit`` bytes."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise too_large(limit, what, why)
    return bytes(body)


@dataclass(frozen=True, slots=True)
class FieldCap:
    """What a form keeps of a capped field: at most ``values`` values of at most
    ``max_bytes`` each."""

    max_bytes: int
    values: int

    @property
    def most_bytes(self) -> int:
        return self.max_bytes * self.values


@dataclass(frozen=True, slots=True)
class Form:
    file: bytes | None  # None: the form has no ``file`` part
    filename: str
    fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # in arrival order
    # A capped field's values past its cap, read past: how many, by field.
    dropped: Mapping[str, int] = field(default_factory=dict)

    def text(self, name: str) -> str | None:
        """The field's value (its last, if it came more than once); None if absent."""
        values = self.fields.get(name)
        return values[-1] if values else None

    def values(self, name: str) -> tuple[str, ...]:
        """Every value of a repeated field (``timestamp_granularities[]``), in order."""
        return self.fields.get(name, ())

    @property
    def hotwords(self) -> str | None:
        return self.text("hotwords")


UPLOAD_GRACE_S = 5.0  # a body's first seconds, before its average rate is held to a minimum


async def paced(
    chunks: AsyncIterator[bytes], min_bytes_per_s: int, *, grace_s: float = UPLOAD_GRACE_S
) -> AsyncIterator[bytes]:
    """``chunks``, refused with 408 once they fall behind ``min_bytes_per_s`` on average
    after ``grace_s``: each next chunk is due when the bytes so far would fall behind, so a
    body that stalls is refused then too, not only at ASR_UPLOAD_TIMEOUT (0: no minimum)."""
    if min_bytes_per_s <= 0:
        async for chunk in chunks:
            yield chunk
        return
    start, received = anyio.current_time(), 0
    iterator = chunks.__aiter__()
    while True:
        due = start + grace_s + received / min_bytes_per_s
        with anyio.move_on_after(max(0.0, due - anyio.current_time())) as scope:
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                return
        if scope.cancelled_caught:
            raise TranscribeError(
                408,
                "upload_timeout",
                f"the body came slower than {min_bytes_per_s} bytes a second"
                " (ASR_UPLOAD_MIN_BYTES_PER_SECOND)",
            )
        received += len(chunk)
        yield chunk


def form_limit(max_file_bytes: int, caps: Mapping[str, FieldCap] | None = None) -> int:
    """The most bytes a form body may take: the file, ``FORM_SLACK_BYTES``, and what the
    capped fields may keep."""
    return max_file_bytes + FORM_SLACK_BYTES + sum(cap.most_bytes for cap in (caps or {}).values())


async def read_form(
    content_type: str,
    chunks: AsyncIterator[bytes],
    max_file_bytes: int,
    fields: Collection[str] = TEXT_FIELDS,
    max_parts: int = MAX_PARTS,
    caps: Mapping[str, FieldCap] | None = None,
) -> Form:
    """Parse a ``multipart/form-data`` body as it arrives, keeping ``fields``' text, and the
    capped fields' within their ``caps``."""
    limit = form_limit(max_file_bytes, caps)
    total = 0
    boundary = boundary_of(content_type)
    with FormReader(boundary, max_file_bytes, fields, max_parts, caps) as reader:
        async for chunk in chunks:
            total += len(chunk)
            if total > limit:
                raise too_large(limit, "the form", FORM_WHY)
            reader.feed(chunk)
        return reader.finish()


def boundary_of(content_type: str) -> bytes:
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise TranscribeError(400, "bad_form", "the multipart Content-Type has no boundary")
    return boundary


class _Part:
    def __init__(self) -> None:
        self.header_name = bytearray()
        self.header_value = bytearray()
        self.disposition = b""
        self.name = ""
        self.filename: str | None = None
        self.data = bytearray()
        self.limit = 0  # what ``data`` may hold; -1: the data is dropped


class FormReader:
    """A multipart form, fed in chunks; what it keeps is bounded by its limits.

    The parser holds this reader's methods as its callbacks, and the reader holds the
    parser: a reference cycle, which only the cyclic collector would free, with the file
    in it. ``close`` (or leaving the ``with`` block) breaks it, so that a request's body is
    freed when the request is done: with the collector tuned to run rarely
    (``shared.gc_tuning``), a cycle kept every upload's bytes for good.
    """

    def __init__(
        self,
        boundary: bytes,
        max_file_bytes: int,
        fields: Collection[str] = TEXT_FIELDS,
        max_parts: int = MAX_PARTS,
        caps: Mapping[str, FieldCap] | None = None,
    ) -> None:
        self._max_file_bytes = max_file_bytes
        self._caps = dict(caps or {})
        self._kept = frozenset(fields) | set(self._caps)
        self._max_parts = max_parts
        self._parts = 0
        self._part = _Part()
        self._ended = False
        self._file: bytes | None = None
        self._filename = ""
        self._fields: dict[str, list[str]] = {}
        self._dropped: dict[str, int] = {}
        self._parser: MultipartParser | None
        try:
            self._parser = MultipartParser(
                boundary,
                {
                    "on_part_begin": self._on_part_begin,
                    "on_header_field": self._on_header_field,
                    "on_header_value": self._on_header_value,
                    "on_header_end": self._on_header_end,
                    "on_headers_finished": self._on_headers_finished,
                    "on_part_data": self._on_part_data,
                    "on_part_end": self._on_part_end,
                    "on_end": self._on_end,
                },
            )
        except FormParserError as error:
            raise TranscribeError(400, "bad_form", f"the multipart boundary: {error}") from None

    def __enter__(self) -> FormReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the parser and of what was read (safe to call twice)."""
        self._parser = None
        self._part = _Part()
        self._file = None

    def feed(self, chunk: bytes) -> None:
        if self._parser is None:
            raise ValueError("the form reader is closed")
        try:
            self._parser.write(chunk)
        except FormParserError as error:
            raise TranscribeError(
                400, "bad_form", f"the multipart body is malformed: {error}"
            ) from None

    def finish(self) -> Form:
        if not self._ended:
            raise TranscribeError(
                400, "bad_form", "the multipart body ends before its closing boundary"
            )
        fields = {name: tuple(values) for name, values in self._fields.items()}
        form = Form(self._file, self._filename, fields, dict(self._dropped))
        self.close()
        return form

    def _on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > self._max_parts:
            raise TranscribeError(
                400, "bad_form", f"the form has more than {self._max_parts} parts"
            )
        self._part = _Part()

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._part.header_name += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._part.header_value += data[start:end]

    def _on_header_end(self) -> None:
        part = self._part
        if bytes(part.header_name).strip().lower() == b"content-disposition":
            part.disposition = bytes(part.header_value)
        part.header_name.clear()
        part.header_value.clear()

    def _on_headers_finished(self) -> None:
        part = self._part
        _, options = parse_options_header(part.disposition)
        name = options.get(b"name")
        if name is None:
            raise TranscribeError(400, "bad_form", "a form part has no name")
        part.name = name.decode("utf-8", "replace")
        filename = options.get(b"filename")
        part.filename = None if filename is None else filename.decode("utf-8", "replace")
        if part.name == "file":
            if self._file is not None:
                raise TranscribeError(400, "bad_form", "the form has more than one 'file' part")
            part.limit = self._max_file_bytes
        elif part.name in self._kept:
            if part.filename is not None:
                raise TranscribeError(
                    400, "bad_form", f"the {part.name!r} field must be text, not a file"
                )
            cap = self._caps.get(part.name)
            if cap is None:
                part.limit = FIELD_MAX_BYTES
            elif len(self._fields.get(part.name, ())) < cap.values:
                part.limit = cap.max_bytes
            else:
                self._drop(part)
        else:
            part.limit = -1

    def _drop(self, part: _Part) -> None:
        """A capped field's value past its cap: read past, counted."""
        self._dropped[part.name] = self._dropped.get(part.name, 0) + 1
        part.limit = -1
        part.data = bytearray()

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._part
        if part.limit < 0:
            return
        if len(part.data) + (end - start) > part.limit:
            if part.name == "file":
                raise too_large(part.limit)
            if part.name in self._caps:
                self._drop(part)
                return
            raise TranscribeError(
                400, "bad_form", f"the {part.name!r} field is over {part.limit} bytes"
            )
        part.data += data[start:end]

    def _on_part_end(self) -> None:
        part = self._part
        if part.name == "file":
            self._file = bytes(part.data)
            self._filename = part.filename or "upload"
        elif part.name in self._kept and part.limit >= 0:
            try:
                text = part.data.decode("utf-8")
            except UnicodeDecodeError:
                raise TranscribeError(
                    400, field_reason(part.name), f"the {part.name!r} field is not UTF-8 text"
                ) from None
            self._fields.setdefault(part.name, []).append(text)
        part.data = bytearray()

    def _on_end(self) -> None:
        self._ended = True


def field_reason(name: str) -> str:
    """The refusal reason of a bad text field: ``bad_hotwords``, ``bad_include``."""
    return "bad_" + name.removesuffix("[]")
