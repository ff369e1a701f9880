"""The log filter for client faults that the server under us logs with a traceback
(``gateway.ops.server_log``), fed the records those libraries make: the exceptions are
websockets' own, raised by its ``ServerProtocol`` on the handshakes that cause them."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator

import pytest
from websockets.server import ServerProtocol

from gateway.ops.server_log import (
    ClientFaultFilter,
    quiet_client_faults,
)

# How uvicorn builds websockets' protocol (``websockets_sansio_impl``), and how the event
# loop reports an exception out of a protocol's ``data_received`` (uvloop's words).
FATAL = "Fatal error on transport TCPTransport\nprotocol: <...>\ntransport: <...>"
HEADERS = {
    "Host": b"127.0.0.1",
    "Upgrade": b"websocket",
    "Connection": b"Upgrade",
    "Sec-WebSocket-Key": b"dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": b"13",
}


def handshake_error(header: str, value: bytes) -> BaseException:
    """What websockets raises, or would log, for a handshake with ``header: value``."""
    headers = {**HEADERS, header: value}
    request = b"GET / HTTP/1.1\r\n"
    request += b"".join(name.encode() + b": " + each + b"\r\n" for name, each in headers.items())
    protocol = ServerProtocol(logger=logging.getLogger("test.websockets"))
    protocol.receive_data(request + b"\r\n")
    (event,) = protocol.events_received()
    try:
        protocol.accept(event)  # type: ignore[arg-type]
    except Exception as error:
        return error
    assert protocol.handshake_exc is not None, "websockets took the handshake"
    return protocol.handshake_exc


@pytest.fixture
def log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    logger = logging.getLogger("test.server_log")
    logger.propagate = False
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.addFilter(ClientFaultFilter())
    yield logger, stream
    logger.removeHandler(handler)
    logger.filters.clear()


def logged(logger: logging.Logger, message: str, error: BaseException) -> None:
    try:
        raise error
    except BaseException:
        logger.error(message, exc_info=sys.exc_info())


@pytest.mark.parametrize(
    "header", ["Sec-WebSocket-Protocol", "Upgrade", "Connection", "Sec-WebSocket-Version"]
)
def test_a_handshake_websockets_cannot_refuse_is_one_warning_line(
    log: tuple[logging.Logger, io.StringIO], header: str
) -> None:
    logger, stream = log
    error = handshake_error(header, HEADERS.get(header, b"real") + b"\xfftime")
    assert isinstance(error, UnicodeEncodeError)  # websockets 15: its 400 cannot be encoded
    logged(logger, FATAL, error)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("WARNING WebSocket handshake dropped unanswered")
    assert header in lines[0]
    assert "\\udcff" in lines[0]  # escaped: the log stays ASCII


def test_a_key_websockets_cannot_encode_is_one_warning_line(
    log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = log
    error = handshake_error("Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ\xff=")
    assert isinstance(error, UnicodeEncodeError)
    logged(logger, "opening handshake failed", error)  # as websockets logs it, then a 500
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("WARNING WebSocket handshake refused with 500")


def test_uvicorns_invalid_utf8_line_keeps_its_message(
    log: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = log
    error = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    logged(logger, "Invalid UTF-8 sequence received from client.", error)
    assert stream.getvalue() == "WARNING Invalid UTF-8 sequence received from client.\n"


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (FATAL, UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")),
        ("opening handshake failed", RuntimeError("a bug of ours")),
        ("Exception in ASGI application", ValueError("a bug of ours")),
    ],
    ids=["no-handshake-behind", "not-an-encoding", "another-message"],
)
def test_other_errors_keep_their_traceback(
    log: tuple[logging.Logger, io.StringIO], message: str, error: BaseException
) -> None:
    logger, stream = log
    logged(logger, message, error)
    assert stream.getvalue().startswith(f"ERROR {message}")
    assert "Traceback" in stream.getvalue()


def test_the_filter_goes_on_uvicorns_and_asyncios_loggers_once() -> None:
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "asyncio")]
    before = [list(logger.filters) for logger in loggers]
    try:
        quiet_client_faults()
        quiet_client_faults()
        for logger in loggers:
            assert sum(isinstance(each, ClientFaultFilter) for each in logger.filters) == 1
    finally:
        for logger, filters in zip(loggers, before, strict=True):
            logger.filters[:] = filters
