"""``python -m gateway.client``: stream a WAV file and print the text.

::

    python -m gateway.client FILE.wav [--url ws://127.0.0.1:10095/]
        [--mode online|offline|2pass] [--fast] [--resumable]

Exit status: 0 with the final result, 1 when the server refused or failed the session, 2
when the file is unusable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import wave
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import anyio
from websockets.exceptions import InvalidHandshake, InvalidURI

from gateway.client.stream import DEFAULT_URL, Message, ServerError, read_wav, transcribe


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


def _report_resume(message: Message) -> None:
    if message.get("resumed") is True:
        print(
            f"gateway.client: resumed session {message.get('id')} at sample"
            f" {message.get('samples')}",
            file=sys.stderr,
            flush=True,
        )


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
        "--resumable",
        action="store_true",
        help="resume the session on a new connection when the connection drops",
    )
    parser.add_argument(
        "--api-key", default=os.environ.get("ASR_API_KEY"), help="default $ASR_API_KEY"
    )
    parser.add_argument("--model", help="a served model (ASR_MODELS); default: the server's")
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
        resumable=args.resumable,
        on_session=_report_resume,
        model=args.model,
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
