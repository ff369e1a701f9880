"""Stream a WAV file to the gateway, or to any FunASR WebSocket server, and print the text.

::

    python -m gateway.client FILE.wav [--url ws://127.0.0.1:10095/]
        [--mode online|offline|2pass] [--fast]

The file must be 16 kHz mono 16-bit PCM. Audio goes out in FunASR's framing (``60 ms x
chunk_size[1] / chunk_interval`` per frame), in real time unless ``--fast``. Online, each
partial prints the transcript so far; the final result prints last. Exit status: 0 with the
final result, 1 when the server refused or failed the session, 2 when the file is unusable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import wave
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.typing import Subprotocol

SAMPLE_RATE = 16000
DEFAULT_URL = "ws://127.0.0.1:10095/"  # where FunASR servers, and our quick start, listen

Message = Mapping[str, object]


class ServerError(Exception):
    """The server closed the session before its final result (with our error frame, if any)."""

    def __init__(self, code: int | None, message: str) -> None:
        super().__init__(f"error {code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str  # online: every result's text joined; offline: the final text
    messages: tuple[Message, ...]  # every result, in order; the last is the final one


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


async def transcribe(
    url: str,
    pcm: bytes,
    *,
    mode: str = "online",
    wav_name: str = "audio",
    chunk_size: Sequence[int] = (5, 10, 5),
    chunk_interval: int = 10,
    realtime: bool = True,
    on_message: Callable[[Message], None] | None = None,
    api_key: str | None = None,
) -> Transcript:
    """Stream ``pcm`` as one utterance and return its results; ``ServerError`` on refusal
    (its ``code`` is the close code, or the HTTP status of a refused handshake)."""
    config = {
        "mode": mode,
        "chunk_size": list(chunk_size),
        "chunk_interval": chunk_interval,
        "wav_name": wav_name,
        "wav_format": "pcm",
        "audio_fs": SAMPLE_RATE,
        "is_speaking": True,
    }
    frame_samples = SAMPLE_RATE * 60 * chunk_size[1] // chunk_interval // 1000
    outcome: Transcript | ServerError
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        async with (
            connect(
                url,
                subprotocols=[Subprotocol("binary")],
                compression=None,
                additional_headers=headers,
            ) as websocket,
            anyio.create_task_group() as group,
        ):
            group.start_soon(
                partial(_send_audio, websocket, config, pcm, 2 * frame_samples, realtime)
            )
            outcome = await _receive_results(websocket, mode, on_message)
            group.cancel_scope.cancel()
    except InvalidStatus as refused:
        raise _handshake_error(refused) from None
    if isinstance(outcome, ServerError):
        raise outcome
    return outcome


async def _send_audio(
    websocket: ClientConnection,
    config: Mapping[str, object],
    pcm: bytes,
    frame_bytes: int,
    realtime: bool,
) -> None:
    frame_seconds = frame_bytes / 2 / SAMPLE_RATE
    try:
        await websocket.send(json.dumps(config))
        start = anyio.current_time()
        for index, offset in enumerate(range(0, len(pcm), frame_bytes)):
            if realtime:
                delay = start + index * frame_seconds - anyio.current_time()
                if delay > 0:
                    await anyio.sleep(delay)
            await websocket.send(pcm[offset : offset + frame_bytes])
        await websocket.send(json.dumps({"is_speaking": False}))
    except ConnectionClosed:
        pass  # the receiver reports why


async def _receive_results(
    websocket: ClientConnection, mode: str, on_message: Callable[[Message], None] | None
) -> Transcript | ServerError:
    messages: list[Message] = []
    try:
        async for raw in websocket:
            if isinstance(raw, bytes):
                continue
            message = json.loads(raw)
            if not isinstance(message, dict):
                continue
            if message.get("type") == "error":
                return ServerError(_int_or_none(message.get("code")), str(message.get("message")))
            messages.append(message)
            if on_message is not None:
                on_message(message)
            if message.get("is_final") is True:
                if mode == "offline":
                    text = str(message.get("text", ""))
                elif mode == "2pass":  # each sentence's offline text replaces its partials
                    text = "".join(
                        str(m.get("text", "")) for m in messages if m.get("mode") == "2pass-offline"
                    )
                else:
                    text = "".join(str(m.get("text", "")) for m in messages)
                return Transcript(text, tuple(messages))
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        return ServerError(code, "the connection closed before the final result")
    return ServerError(None, "the server closed the connection before the final result")


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


def _printer() -> Callable[[Message], None]:
    parts: list[str] = []

    def show(message: Message) -> None:
        text = str(message.get("text", ""))
        if message.get("mode") == "online":
            parts.append(text)
            text = "".join(parts)
        label = "final" if message.get("is_final") is True else "partial"
        print(f"{label}: {text}", flush=True)

    return show


def _print_json(message: Message) -> None:
    print(json.dumps(message, ensure_ascii=False), flush=True)


def _chunk_size(value: str) -> tuple[int, int, int]:
    try:
        a, b, c = (int(part) for part in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError('expected three integers, e.g. "5,10,5"') from None
    return a, b, c


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.client",
        description="Stream a 16 kHz mono 16-bit WAV file to the gateway and print the text.",
        epilog="Exit status: 0 with the final result, 1 when the server refused or failed the"
        " session (or cannot be reached), 2 when the file is unusable.",
    )
    parser.add_argument("file", type=Path, help="a 16 kHz mono 16-bit WAV file")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"default {DEFAULT_URL}")
    parser.add_argument("--mode", choices=("online", "offline", "2pass"), default="online")
    parser.add_argument("--fast", action="store_true", help="send as fast as possible")
    parser.add_argument(
        "--chunk-size", type=_chunk_size, default=(5, 10, 5), metavar="A,B,C", help="default 5,10,5"
    )
    parser.add_argument("--chunk-interval", type=int, default=10, metavar="N", help="default 10")
    parser.add_argument("--json", action="store_true", help="print each result as JSON")
    parser.add_argument(
        "--api-key", default=os.environ.get("ASR_API_KEY"), help="default $ASR_API_KEY"
    )
    args = parser.parse_args(argv)
    try:
        pcm = read_wav(args.file)
    except (OSError, EOFError, wave.Error, ValueError) as exc:
        print(f"gateway.client: {exc}", file=sys.stderr)
        return 2
    on_message = _print_json if args.json else _printer()
    run = partial(
        transcribe,
        args.url,
        pcm,
        mode=args.mode,
        wav_name=args.file.stem,
        chunk_size=args.chunk_size,
        chunk_interval=args.chunk_interval,
        realtime=not args.fast,
        on_message=on_message,
        api_key=args.api_key,
    )
    try:
        anyio.run(run)
    except ServerError as exc:
        print(f"gateway.client: {exc}", file=sys.stderr)
        return 1
    except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
        print(f"gateway.client: cannot connect to {args.url}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
