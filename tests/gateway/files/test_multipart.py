"""gateway.files.multipart without a socket: the form parser fed chunks, the caps, the
Content-Length."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import anyio
import pytest

from gateway.files import multipart
from gateway.files.errors import TranscribeError
from gateway.files.multipart import (
    FIELD_MAX_BYTES,
    FieldCap,
    FormReader,
    boundary_of,
    check_declared_length,
    form_limit,
    paced,
    read_capped,
    read_form,
)
from tests.helpers.timing import within

BOUNDARY = b"----b0undary"
CONTENT_TYPE = "multipart/form-data; boundary=" + BOUNDARY.decode()


def part(name: str, data: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"'
    if filename is not None:
        disposition += f'; filename="{filename}"'
    return b"--%s\r\nContent-Disposition: %s\r\n\r\n%s\r\n" % (
        BOUNDARY,
        disposition.encode(),
        data,
    )


def form(*parts: bytes) -> bytes:
    return b"".join(parts) + b"--%s--\r\n" % BOUNDARY


def feed(body: bytes, max_file_bytes: int = 1000, chunk: int = 7) -> FormReader:
    reader = FormReader(BOUNDARY, max_file_bytes)
    for start in range(0, len(body), chunk):
        reader.feed(body[start : start + chunk])
    return reader


def refusal(body: bytes, max_file_bytes: int = 1000) -> TranscribeError:
    with pytest.raises(TranscribeError) as refused:
        feed(body, max_file_bytes).finish()
    return refused.value


def test_a_form_fed_in_small_chunks_gives_its_file_and_hotwords() -> None:
    audio = bytes(range(256)) * 3  # CR, LF and '-' inside the data
    body = form(
        part("hotwords", "阿里巴巴 达摩院".encode()),
        part("other", b"dropped"),
        part("file", audio, "a.wav"),
    )
    for chunk in (1, 7, len(body)):
        got = feed(body, chunk=chunk).finish()
        assert got.file == audio
        assert got.filename == "a.wav"
        assert got.hotwords == "阿里巴巴 达摩院"


def test_a_file_part_without_a_filename_is_taken_as_an_upload() -> None:
    got = feed(form(part("file", b"RIFF"))).finish()
    assert (got.file, got.filename, got.hotwords) == (b"RIFF", "upload", None)


def test_a_form_without_a_file_has_none() -> None:
    assert feed(form(part("hotwords", b"a"))).finish().file is None


def test_a_file_over_the_cap_is_refused_as_soon_as_it_passes_it() -> None:
    reader = FormReader(BOUNDARY, 100)
    reader.feed(b"--%s\r\nContent-Disposition: form-data; name=file\r\n\r\n" % BOUNDARY)
    reader.feed(bytes(100))  # exactly the cap: held
    with pytest.raises(TranscribeError) as refused:
        reader.feed(bytes(64))
    assert (refused.value.status, refused.value.reason) == (413, "too_large")


def test_the_file_may_be_exactly_the_cap() -> None:
    assert feed(form(part("file", bytes(1000), "a.wav"))).finish().file == bytes(1000)


def test_a_text_field_over_its_cap_is_a_400() -> None:
    error = refusal(form(part("hotwords", b"x" * (FIELD_MAX_BYTES + 1))))
    assert (error.status, error.reason) == (400, "bad_form")
    assert "'hotwords'" in error.message


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        pytest.param(
            form(*[part(f"f{i}", b"x") for i in range(9)]), "more than 8 parts", id="parts"
        ),
        pytest.param(
            form(part("file", b"a", "a.wav"), part("file", b"b", "b.wav")),
            "more than one 'file'",
            id="two-files",
        ),
        pytest.param(form(part("hotwords", b"a", "h.txt")), "must be text", id="hotwords-file"),
        pytest.param(form(part("file", b"a", "a.wav"))[:-12], "closing boundary", id="truncated"),
        pytest.param(b"not a form at all", "malformed", id="garbage"),
        pytest.param(
            b"--%s\r\nContent-Disposition: form-data\r\n\r\nx\r\n--%s--\r\n" % (BOUNDARY, BOUNDARY),
            "no name",
            id="no-name",
        ),
    ],
)
def test_bad_forms_are_a_400(body: bytes, fragment: str) -> None:
    error = refusal(body)
    assert error.status == 400
    assert fragment in error.message


def test_hotwords_that_are_not_utf8_are_a_400() -> None:
    error = refusal(form(part("hotwords", b"\xff\xfe")))
    assert (error.status, error.reason) == (400, "bad_hotwords")


def test_the_boundary_comes_from_the_content_type() -> None:
    assert boundary_of(CONTENT_TYPE + "; charset=utf-8") == BOUNDARY
    with pytest.raises(TranscribeError, match="no boundary"):
        boundary_of("multipart/form-data")


@pytest.mark.parametrize(
    ("declared", "status"),
    [("100", None), (None, None), ("101", 413), ("abc", 400), ("-5", 400), ("", 400)],
)
def test_the_declared_length_is_checked_first(declared: str | None, status: int | None) -> None:
    headers = {} if declared is None else {"content-length": declared}
    if status is None:
        check_declared_length(headers, 100, "the body", "a test")
        return
    with pytest.raises(TranscribeError) as refused:
        check_declared_length(headers, 100, "the body", "a test")
    assert refused.value.status == status


async def chunks(pieces: Iterable[bytes], taken: list[int]) -> AsyncIterator[bytes]:
    for piece in pieces:
        taken.append(len(piece))
        yield piece


@pytest.mark.anyio
async def test_a_capped_read_stops_at_the_chunk_that_passes_the_cap() -> None:
    taken: list[int] = []
    with pytest.raises(TranscribeError) as refused:
        await read_capped(chunks([bytes(40)] * 100, taken), 100, "the JSON body", "a test")
    assert refused.value.status == 413
    assert sum(taken) == 120  # the third chunk: nothing read after it
    assert await read_capped(chunks([b"{}"], []), 100, "the JSON body", "a test") == b"{}"


@pytest.mark.anyio
async def test_a_form_read_stops_at_its_cap_whatever_the_parts() -> None:
    # An ignored field is dropped, not kept, but it still counts towards the body's cap.
    taken: list[int] = []
    head = b"--%s\r\nContent-Disposition: form-data; name=pad\r\n\r\n" % BOUNDARY
    with pytest.raises(TranscribeError) as refused:
        await read_form(CONTENT_TYPE, chunks([head] + [bytes(65536)] * 100, taken), 1000)
    assert refused.value.status == 413
    assert sum(taken) < 1000 + (256 << 10) + 65536 + len(head) + 1


CAPS = {"clip[]": FieldCap(max_bytes=100, values=2)}


def test_a_capped_field_keeps_its_first_values_within_the_cap_and_counts_the_rest() -> None:
    body = form(
        part("file", b"RIFF", "a.wav"),
        part("clip[]", b"a" * 100),
        part("clip[]", b"b" * 101),  # over its size: read past
        part("clip[]", b"c"),
        part("clip[]", b"d"),  # past its count: read past, whatever its size
    )
    reader = FormReader(BOUNDARY, 1000, {"model"}, caps=CAPS)
    for start in range(0, len(body), 7):
        reader.feed(body[start : start + 7])
    got = reader.finish()
    assert got.values("clip[]") == ("a" * 100, "c")
    assert got.dropped == {"clip[]": 2}
    assert form_limit(1000, CAPS) == form_limit(1000) + 200


@pytest.mark.anyio
async def test_a_forms_cap_grows_by_what_its_capped_fields_may_keep() -> None:
    clips = [part("clip[]", b"x" * 100)] * 2
    # A body 100 bytes over the cap of a form without capped fields, within this one's.
    padding = form_limit(1000) + 100 - len(form(part("pad", b""), *clips))
    body = form(part("pad", bytes(padding)), *clips)
    kept = await read_form(CONTENT_TYPE, chunks([body], []), 1000, caps=CAPS)
    assert kept.values("clip[]") == ("x" * 100, "x" * 100)
    with pytest.raises(TranscribeError) as refused:
        await read_form(CONTENT_TYPE, chunks([body], []), 1000)
    assert refused.value.status == 413


@pytest.fixture
def no_cyclic_collection() -> Iterator[None]:
    """The collector off, as good as it is under shared.gc_tuning's thresholds: what is
    freed must be freed by reference counting alone."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "body", [form(part("file", bytes(4096), "a.wav")), form(part("file", bytes(8192)))]
)
@pytest.mark.usefixtures("no_cyclic_collection")
async def test_a_forms_reader_and_its_file_are_freed_when_the_request_is_done(
    body: bytes,
) -> None:
    """The parser holds the reader's methods, the reader the parser: unbroken, the cycle
    kept every upload's bytes until a full collection, which the tuned collector all but
    never runs (+50 MiB of gateway memory per 50 MiB upload, for good)."""
    readers: list[weakref.ref[FormReader]] = []
    real_reader = FormReader

    def tracked(*args: Any, **kwargs: Any) -> FormReader:
        reader = real_reader(*args, **kwargs)
        readers.append(weakref.ref(reader))
        return reader

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(multipart, "FormReader", tracked)
        try:
            form_read = await read_form(CONTENT_TYPE, chunks(), max_file_bytes=6000)
            del form_read
        except TranscribeError:
            pass  # the second body is over the cap: refused mid-file
    assert len(readers) == 1
    assert readers[0]() is None


async def _arriving(pieces: list[tuple[float, bytes]]) -> AsyncIterator[bytes]:
    for wait, piece in pieces:
        await anyio.sleep(wait)
        yield piece


async def _read(chunks: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in chunks])


@pytest.mark.anyio
async def test_a_body_that_keeps_its_average_rate_is_read_whole() -> None:
    # 10 kB a second, held to 8 kB a second after a 0.1 s grace.
    body = _arriving([(0.05, bytes(1000))] * 6)
    assert await _read(paced(body, 8000, grace_s=0.1)) == bytes(6000)


@pytest.mark.anyio
async def test_a_body_that_falls_behind_the_least_rate_is_408() -> None:
    """A trickle that would hold a transcription place for ASR_UPLOAD_TIMEOUT at almost no
    cost: refused as soon as its average falls behind."""
    body = _arriving([(0.05, bytes(10))] * 100)  # 200 bytes a second
    with within(2), pytest.raises(TranscribeError) as refused:
        await _read(paced(body, 8000, grace_s=0.1))
    assert refused.value.status == 408
    assert "ASR_UPLOAD_MIN_BYTES_PER_SECOND" in refused.value.message


@pytest.mark.anyio
async def test_a_body_that_stalls_is_408_when_it_falls_behind() -> None:
    body = _arriving([(0.0, bytes(800)), (3600.0, b"")])  # 0.1 s of the rate, then nothing
    started = anyio.current_time()
    with within(2), pytest.raises(TranscribeError):
        await _read(paced(body, 8000, grace_s=0.1))
    assert anyio.current_time() - started == pytest.approx(0.2, abs=0.1)
