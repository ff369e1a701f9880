"""A client's stream of PCM to the gateway, or to any FunASR WebSocket server
(``transcribe``); ``gateway.client.cli`` is its command line.

The audio must be 16 kHz mono 16-bit PCM. Audio goes out in FunASR's framing (``60 ms x
chunk_size[1] / chunk_interval`` per frame), in real time unless ``--fast``. Online, each
partial prints the transcript so far; the final result prints last. With ``--resumable``
the session survives a dropped connection: the client reconnects with the server's resume
token and sends again what the server had not taken (``gateway.client.resume``). Exit
status: 0 with the final result, 1 when the server refused or failed the session, 2 when
the file is unusable.
"""

from __future__ import annotations

import json
import wave
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import anyio
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    ConnectionClosedOK,
    InvalidMessage,
    InvalidStatus,
)
from websockets.typing import Subprotocol

from gateway.audio.pcm import BYTES_PER_SECOND, SAMPLE_RATE
from gateway.client.resume import (
    Acked,
    Duplicate,
    ProtocolViolation,
    Resend,
    Result,
    ResumeTracker,
    SessionOpened,
    backoff_delays,
    is_dropped,
    is_retry_later,
)
from gateway.client.resume import (
    Message as Message,  # re-exported: the type of what the callbacks get
)

DEFAULT_URL = "ws://127.0.0.1:10095/"  # where FunASR servers, and our quick start, listen

MessageCallback = Callable[[Message], None]


SESSION_FRAME_WAIT_S = 2.0  # for a resumable session's first frame before sending audio
FRESH_STARTS = 3  # new sessions tried when a connection drops before its session frame


class ServerError(Exception):
    """The server closed the session before its final result (with our error frame, if any)."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(f"error {code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str  # online: every result's text joined; offline: the final text
    messages: tuple[Message, ...]  # every result, in order, once; the last is the final one
    resumes: int = 0  # how many times the session was resumed on a new connection
    duplicates: int = 0  # results a resumed server sent again, dropped


@dataclass(frozen=True, slots=True)
class _Dropped:
    """The connection was lost, not (yet) the session: resumable, if it has a token."""

    code: int | None
    message: str


Outcome = Transcript | ServerError | _Dropped


def read_wav(path: Path) -> bytes:
    """The PCM of a 16 kHz mono 16-bit WAV file; ``ValueError`` for any other format."""
    with wave.open(str(path), "rb") as wav:
        channels, width, rate = wav.getnchannels(), wav.getsampwidth(), wav.getframerate()
        if (channels, width, rate) != (1, 2, SAMPLE_RATE):
            raise ValueError(
                f"{path}: {channels} channel(s), {8 * width}-bit, {rate} Hz;"
                " the gateway takes 16 kHz mono 16-bit PCM (e.g. ffmpeg -ar 16000 -ac 1)"
            )
        return wav.readframes(wav.getnframes())


class _Pacer:
    """Real-time pacing anchored at the session's first frame and kept across connections:
    audio sent again after a resume goes at once up to where that schedule has got (as a
    live source's buffered audio would), then in real time."""

    def __init__(self, realtime: bool) -> None:
        self.realtime = realtime
        self._start: float | None = None

    async def wait_for(self, offset: int) -> None:
        if not self.realtime:
            return
        now = anyio.current_time()
        if self._start is None:
            self._start = now - offset / BYTES_PER_SECOND
        delay = self._start + offset / BYTES_PER_SECOND - now
        if delay > 0:
            await anyio.sleep(delay)


@dataclass(frozen=True, slots=True)
class _Stream:
    """One utterance's session: what outlives each of its connections."""

    url: str
    headers: Mapping[str, str] | None
    config: Mapping[str, object]
    pcm: bytes
    frame_bytes: int
    mode: str
    pacer: _Pacer
    tracker: ResumeTracker
    results: list[Message]
    on_message: MessageCallback | None
    on_session: MessageCallback | None

    def transcript(self) -> Transcript:
        messages = self.results
        if self.mode == "offline":
            text = str(messages[-1].get("text", ""))
        elif self.mode == "2pass":  # each sentence's offline text replaces its partials
            text = "".join(
                str(m.get("text", "")) for m in messages if m.get("mode") == "2pass-offline"
            )
        else:
            text = "".join(str(m.get("text", "")) for m in messages)
        return Transcript(text, tuple(messages), self.tracker.resumes, self.tracker.duplicates)


async def transcribe(
    url: str,
    pcm: bytes,
    *,
    mode: str = "online",
    wav_name: str = "audio",
    chunk_size: Sequence[int] = (5, 10, 5),
    chunk_interval: int = 10,
    realtime: bool = True,
    on_message: MessageCallback | None = None,
    api_key: str | None = None,
    resumable: bool = False,
    on_session: MessageCallback | None = None,
    model: str | None = None,
) -> Transcript:
    """Stream ``pcm`` as one utterance and return its results; ``ServerError`` on refusal
    (its ``code`` is the close code, or the HTTP status of a refused handshake).

    ``resumable``: ask for a resumable session and, when the connection drops, resume it
    (for up to the window the server's session frame gives). ``on_message`` sees each
    result once; ``on_session`` each session frame, the first and one per resume.
    ``model``: a served model's name, sent in the config (the URL's ``?model=`` does the
    same, where a proxy can see it)."""
    config: dict[str, object] = {
        "mode": mode,
        "chunk_size": list(chunk_size),
        "chunk_interval": chunk_interval,
        "wav_name": wav_name,
        "wav_format": "pcm",
        "audio_fs": SAMPLE_RATE,
        "is_speaking": True,
    }
    if resumable:
        config["resumable"] = True
    if model is not None:
        config["model"] = model
    frame_samples = SAMPLE_RATE * 60 * chunk_size[1] // chunk_interval // 1000
    stream = _Stream(
        url=url,
        headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
        config=config,
        pcm=pcm,
        frame_bytes=2 * frame_samples,
        mode=mode,
        pacer=_Pacer(realtime),
        tracker=ResumeTracker(audio_samples=len(pcm) // 2),
        results=[],
        on_message=on_message,
        on_session=on_session,
    )
    outcome = await _connection(stream, url, first=True)  # OSError: cannot connect at all
    for _ in range(FRESH_STARTS):
        lost_before_session = isinstance(outcome, _Dropped) and not stream.tracker.can_resume
        if not (resumable and lost_before_session and not stream.results):
            break
        # Lost before the session frame: no token to resume with, but no result was
        # delivered either, so the utterance starts over in a new session. (The server
        # parks the one it had until its window passes.)
        stream = replace(
            stream, tracker=ResumeTracker(audio_samples=len(pcm) // 2), pacer=_Pacer(realtime)
        )
        await anyio.sleep(next(iter(backoff_delays())))
        outcome = await _connection(stream, url, first=True)
    while isinstance(outcome, _Dropped) and resumable and stream.tracker.can_resume:
        outcome = await _resume(stream, outcome)
    if isinstance(outcome, _Dropped):
        outcome = ServerError(outcome.code, outcome.message)
    if isinstance(outcome, ServerError):
        raise outcome
    return outcome


async def _resume(stream: _Stream, dropped: _Dropped) -> Outcome:
    """Reconnect with the newest token, backing off, until a connection gets its session
    frame or the resume window passes; then that connection's outcome."""
    window_s = stream.tracker.window_s
    deadline = anyio.current_time() + window_s
    resumes = stream.tracker.resumes
    for delay in backoff_delays():
        await anyio.sleep(max(0.0, min(delay, deadline - anyio.current_time())))
        if anyio.current_time() >= deadline:
            break
        try:
            outcome = await _connection(stream, stream.tracker.resume_url(stream.url), first=False)
        except (OSError, TimeoutError, InvalidMessage) as exc:  # refused, unreachable, cut
            dropped = _Dropped(None, f"cannot reconnect: {exc}")
            continue
        if isinstance(outcome, _Dropped) and stream.tracker.resumes == resumes:
            dropped = outcome  # lost before its session frame: the same token again
            continue
        if isinstance(outcome, ServerError) and is_retry_later(outcome.code):
            dropped = _Dropped(outcome.code, outcome.message)  # the token works a bit later
            continue
        return outcome
    return ServerError(dropped.code, f"{dropped.message} (not resumed within {window_s:g} s)")


async def _connection(stream: _Stream, url: str, *, first: bool) -> Outcome:
    """One WebSocket of the session. The first sends the config and all the audio at once;
    a resumed one waits for its session frame to know what to send again."""
    try:
        async with (
            connect(
                url,
                subprotocols=[Subprotocol("binary")],
                compression=None,
                additional_headers=stream.headers,
            ) as websocket,
            anyio.create_task_group() as group,
        ):
            opened = anyio.Event()  # this connection's session frame has come

            def start_sending(resend: Resend, config: Mapping[str, object] | None = None) -> None:
                group.start_soon(partial(_send_audio, websocket, stream, resend, config, opened))

            if first:
                start_sending(Resend(from_byte=0, send_end=True), stream.config)
            outcome = await _receive_results(websocket, stream, start_sending, opened)
            group.cancel_scope.cancel()
    except InvalidStatus as refused:
        return _handshake_error(refused)
    return outcome


async def _send_audio(
    websocket: ClientConnection,
    stream: _Stream,
    resend: Resend,
    config: Mapping[str, object] | None,
    opened: anyio.Event,
) -> None:
    try:
        if config is not None:
            await websocket.send(json.dumps(config))
            if config.get("resumable"):
                # The token first: audio sent before it would be lost with a drop that
                # came before it (the session could not be resumed). A server that knows
                # nothing of resumes sends no session frame: then go on without one.
                with anyio.move_on_after(SESSION_FRAME_WAIT_S):
                    await opened.wait()
        for offset in range(resend.from_byte, len(stream.pcm), stream.frame_bytes):
            await stream.pacer.wait_for(offset)
            await websocket.send(stream.pcm[offset : offset + stream.frame_bytes])
        if resend.send_end:
            await websocket.send(json.dumps({"is_speaking": False}))
    except (ConnectionClosed, OSError):
        pass  # the receiver reports why


async def _receive_results(
    websocket: ClientConnection,
    stream: _Stream,
    start_sending: Callable[[Resend], None],
    opened: anyio.Event,
) -> Outcome:
    try:
        while True:
            raw = await websocket.recv()
            if isinstance(raw, bytes):
                continue
            message = json.loads(raw)
            if not isinstance(message, dict):
                continue
            if message.get("type") == "error":
                return ServerError(_int_or_none(message.get("code")), str(message.get("message")))
            try:
                event = stream.tracker.feed(message)
            except ProtocolViolation as exc:
                return ServerError(None, str(exc))
            match event:
                case SessionOpened(resend=resend):
                    opened.set()
                    if stream.on_session is not None:
                        stream.on_session(message)
                    if resend is not None:
                        start_sending(resend)
                case Acked() | Duplicate():
                    pass
                case Result(message=result):
                    stream.results.append(result)
                    if stream.on_message is not None:
                        stream.on_message(result)
                    if result.get("is_final") is True:
                        return stream.transcript()
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        if isinstance(exc, ConnectionClosedOK):
            reason = "the server closed the connection before the final result"
        else:
            reason = "the connection closed before the final result"
        return _Dropped(code, reason) if is_dropped(code) else ServerError(code, reason)
    except OSError as exc:
        return _Dropped(None, f"the connection failed: {exc}")


def _handshake_error(refused: InvalidStatus) -> ServerError:
    """Our gateway explains a refused handshake (401, 403) in a JSON body."""
    response = refused.response
    try:
        message = str(json.loads(response.body or b"{}")["message"])
    except (ValueError, KeyError, TypeError):
        message = f"the server refused the connection (HTTP {response.status_code})"
    return ServerError(response.status_code, message)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None
