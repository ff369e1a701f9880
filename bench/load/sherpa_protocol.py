"""sherpa-onnx's online WebSocket protocol, sans I/O, as ``bench.load.ws_load --protocol
sherpa`` speaks it to ``sherpa-onnx-online-websocket-server`` (sherpa-onnx 2.0.1:
``sherpa-onnx/csrc/online-websocket-server-impl.cc``; its Python client
``python-api-examples/online-websocket-client-decode-file.py``).

- Client to server: binary frames of float32 samples (little-endian, 16 kHz mono, in
  [-1, 1): its Paraformer scales them by 32768 itself), then the text frame ``Done``. No
  config, no handshake fields.
- Server to client: one JSON text frame per decode step of the stream, the text of the
  current segment so far (``text``, ``tokens``, ``timestamps``, ..., ``segment``,
  ``start_time``, ``is_final``, ``is_eof``): ``is_final`` where an endpoint closes a segment
  (the next result opens the next one) and on the last result, ``is_eof`` on the last
  alone, after ``Done`` (which adds 0.8 s of silence, ``--end-tail-padding``); then the
  text ``Done!``. The last result lacks both flags where its step was taken up before the
  server marked the stream ended (``InputFinished`` adds the padding, then sets ``eof``,
  on another thread): ``Done!`` follows within a loop interval (10 ms), and ends it.
  Fields it adds (2.0.1's ``num_trailing_blanks``) are ignored.

Which audio a result answers: the server does not say, but it needs no guess. Every decode
step gets exactly one result, in order (``Decode()`` answers each stream of its batch, a
stream is in one batch at a time), and the Paraformer's steps lie at fixed places
(``online-recognizer-paraformer-impl.h``): step n reads fbank frames [60n, 60n + 61) (61
frames of 10 ms: 10 low-frame-rate frames, the last overlapping the next step) and is taken
up once frame 60n + 61 exists too (``IsReady``'s strict ``<``). With 25 ms windows at a
10 ms shift, that is once ``samples_needed(n)`` = 9600n + 10160 samples have arrived. An
endpoint resets the segment, not where the steps fall (``OnlineStream::Reset`` moves its
start by the frames processed). Checked against the 2.0.1 server: audio sent 10 ms at a
time, step n's result comes right after the send that crosses ``samples_needed(n)``, never
before it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

END_OF_AUDIO = "Done"  # the client's last frame
END_ACK = "Done!"  # the server's, after the last result
FRAME_SHIFT = 160  # samples: 10 ms at 16 kHz
FRAME_LENGTH = 400  # samples: 25 ms, snip_edges (no frame before the first whole window)
STEP_FRAMES = 60  # fbank frames a step moves on by (chunk_size_ - 1)
CHUNK_FRAMES = 61  # fbank frames a step reads (chunk_size_)
FULL_SCALE = 32768.0  # int16 to [-1, 1), as the client does


class ProtocolError(ValueError):
    """A frame that is neither a result nor ``Done!``."""


@dataclass(frozen=True, slots=True)
class SherpaResult:
    """One decode step's answer: the current segment's text so far."""

    text: str
    segment: int
    is_final: bool  # an endpoint closed the segment, or the last result
    is_eof: bool  # the last result: the audio and its tail padding are decoded


@dataclass(frozen=True, slots=True)
class EndAck:
    """``Done!``: the stream is over, nothing follows."""


def parse(message: str | bytes) -> SherpaResult | EndAck:
    """One server frame."""
    if isinstance(message, bytes):
        raise ProtocolError(f"a binary frame of {len(message)} bytes")
    if message == END_ACK:
        return EndAck()
    try:
        fields = json.loads(message)
    except ValueError:
        raise ProtocolError(f"not JSON: {message[:80]!r}") from None
    if not isinstance(fields, dict) or not isinstance(fields.get("text"), str):
        raise ProtocolError(f"not a result: {message[:80]!r}")
    return SherpaResult(
        text=fields["text"],
        segment=int(fields.get("segment", 0)),
        is_final=bool(fields.get("is_final", False)),
        is_eof=bool(fields.get("is_eof", False)),
    )


def samples_needed(step: int) -> int:
    """The samples the server must have received before it takes up decode step ``step``
    (from 0): the end of fbank frame ``60 * step + 61``."""
    return (STEP_FRAMES * step + CHUNK_FRAMES) * FRAME_SHIFT + FRAME_LENGTH


def audio_frame(samples: npt.NDArray[np.int16]) -> bytes:
    """Our 16-bit PCM as sherpa's client sends it."""
    return (samples.astype(np.float32) / FULL_SCALE).astype("<f4").tobytes()
