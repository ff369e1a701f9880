"""SenseVoiceSmall as a streaming model: each speech region decoded again as it grows.

SenseVoiceSmall is an offline model. Its SAN-M encoder has a chunked path, but the model
was never trained on it, and the projects that tried it gave it up for repeated and wrong
tokens (../shared/docs/anchors-live.md, 1.1); every working streaming SenseVoice decodes the
audio so far with the offline model, over and over. So does this engine, with the offline
engine's own decode (``SenseVoiceEngine.recognise``, or ``SenseVoiceOnnxEngine``'s), so a
partial is exactly what the offline model says of the audio it covers.

A stream is one speech region: the gateway opens one per region it finds (the FSMN-VAD
pool's, or the energy endpointer's), in every mode (``EngineCapabilities.regions``). At
each piece before the final one (a chunk of ``chunk_size[1]`` x 60 ms, cut by the gateway)
the stream's text so far is decoded again and answered, tagged (``text_is_delta`` false:
each result is the region's text so far, and may revise the one before). The final piece
is answered with the decode of the whole region: SenseVoice's offline decode of exactly that
audio, as ``generate`` gives it (unless another pass decodes it, ``StreamOptions
.final_decode``: a 2pass sentence's offline pass; then with the last partial again).

**Batched across streams.** Every stream with a piece in the step is decoded in the same
calls: one per group of the same language and ITN choice and of similar lengths
(``whole_utterance.calls``), as the offline finals are. A stream with several pieces in one
step (its worker fell behind) is decoded once, at its last: the earlier pieces are answered
with no text, so a busy worker does less work per chunk rather than falling further behind.

**The window.** Decoding the whole region at every chunk costs about L / (2 s) times the
offline decode for a region of L seconds with a partial every s seconds: quadratic in the
region. So a partial decodes at most ``PARTIAL_WINDOW_S`` of audio: once the window holds
that much, its text is kept as it was last decoded, and the next window starts where it
ended; a partial's text is the kept windows' texts, then the open window's decode. Each
step then costs at most one decode of ``PARTIAL_WINDOW_S`` per stream, whatever the
region's length, and the final decode of the whole region (bounded by the gateway's
ASR_MAX_SEGMENT_SECONDS) fixes what the cuts between windows cost. 8 s is sherpa-onnx's
cap for the same method (its VAD's ``max_speech_duration``) and long enough that most
sentences are decoded whole every time; BENCHMARKS.md ("Streaming SenseVoice") has what it
costs per stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from shared.audio import Samples
from shared.engines import EngineCapabilities
from shared.messages import NOTHING, SAMPLE_RATE, Decoded, EngineSpec, StreamOptions
from workers.engines.base import ChunkItem, ChunkOutput
from workers.engines.table import Step, TableEngine, engine_error
from workers.engines.whole_utterance import Final, calls

PARTIAL_WINDOW_S = 8.0


class Recogniser(Protocol):
    """An offline engine's decode of a group of utterances that share a language and an
    ITN choice: one answer per utterance, in order."""

    def recognise(self, group: list[Final]) -> list[Decoded]: ...


@dataclass(slots=True)
class Region:
    """One stream's speech region so far."""

    options: StreamOptions
    pieces: list[Samples] = field(default_factory=list)
    window_start: int = 0  # the first piece of the open window
    window_samples: int = 0  # its length
    kept: list[str] = field(default_factory=list)  # the closed windows' texts
    said: Decoded = NOTHING  # the last partial's answer

    def audio(self, start: int = 0) -> Samples:
        if not self.pieces[start:]:
            return np.zeros(0, np.int16)
        return np.concatenate(self.pieces[start:])


@dataclass(frozen=True, slots=True)
class _Due:
    """A decode the step owes: of ``audio``, for item ``index`` of ``stream_id``."""

    index: int
    stream_id: int
    final: bool
    audio: Samples
    region: Region


class RedecodingEngine(TableEngine[Region]):
    """A streaming engine over an offline recogniser: each region decoded again at every
    chunk (in windows of at most ``window_s`` seconds), and whole at its end."""

    # A session costs 6 of the gateway's places: on this 2-core machine two workers serve 2
    # such streams in real time against 13 of the streaming Paraformer's (ONNX fp32), the
    # window bounding each chunk's decode (BENCHMARKS.md, "Streaming SenseVoice").
    capabilities = EngineCapabilities(
        text_is_delta=False, languages=True, regions=True, session_places=6
    )

    def __init__(self, recogniser: Recogniser, window_s: float = PARTIAL_WINDOW_S) -> None:
        super().__init__()
        self._recogniser = recogniser
        self.window_cap = int(window_s * SAMPLE_RATE)  # samples

    def open_stream(self, stream_id: int, options: StreamOptions) -> None:
        self.streams.open(stream_id, Region(options))

    def feed(self, items: Sequence[ChunkItem]) -> list[ChunkOutput]:
        step = self.streams.step(items)
        last_of: dict[int, int] = {}  # each stream's last piece in the step
        for index, item, region in step.pending():
            region.pieces.append(item.samples)
            region.window_samples += len(item.samples)
            last_of[item.stream_id] = index
        due: list[_Due] = []
        for index, item, region in step.pending():
            if last_of[item.stream_id] != index:
                step.answer(index)  # superseded by a later piece of its stream
            elif item.final and not region.options.final_decode:
                step.answer(index, region.said)  # another pass decodes the whole region
            elif item.final:
                due.append(_Due(index, item.stream_id, True, region.audio(), region))
            else:
                audio = region.audio(region.window_start)
                due.append(_Due(index, item.stream_id, False, audio, region))
        self._decode(step, due)
        return step.outputs()

    def _decode(self, step: Step[Region], due: list[_Due]) -> None:
        finals = [Final(d.index, step.items[d.index], d.audio, d.region.options) for d in due]
        for d in due:
            if not len(d.audio):  # nothing heard yet: no text, and no tags
                step.answer(d.index)
        for indices in calls(finals, _language_and_itn):
            try:
                answers = self._recogniser.recognise([finals[i] for i in indices])
            except Exception as exc:  # the call failed: so did every stream in it
                for i in indices:
                    step.fail(due[i].stream_id, engine_error(exc))
                continue
            for i, answer in zip(indices, answers, strict=True):
                step.answer(due[i].index, self._answer(due[i], answer))

    def _answer(self, due: _Due, decoded: Decoded) -> Decoded:
        """The region's text so far: its kept windows' texts and ``decoded``, the open
        window's (or, at the final piece, the whole region's decode alone)."""
        if due.final:
            return decoded
        region = due.region
        text = " ".join(t for t in (*region.kept, decoded.text) if t)
        if region.window_samples >= self.window_cap:
            region.kept.append(decoded.text)
            region.window_start, region.window_samples = len(region.pieces), 0
        region.said = Decoded(text, tags=decoded.tags)
        return region.said


def _language_and_itn(options: StreamOptions) -> tuple[str, bool]:
    return options.language, options.model_itn


class SenseVoiceStreamingEngine(RedecodingEngine):
    """SenseVoiceSmall streamed, on funasr's PyTorch ``generate``."""

    name = "sensevoice-streaming"

    @classmethod
    def load(cls, spec: EngineSpec) -> SenseVoiceStreamingEngine:
        from workers.engines.sensevoice.engine import SenseVoiceEngine

        return cls(SenseVoiceEngine.load(spec), spec.redecode_window_s)


class SenseVoiceStreamingOnnxEngine(RedecodingEngine):
    """SenseVoiceSmall streamed, on ONNX Runtime (funasr's export)."""

    name = "sensevoice-streaming-onnx"

    @classmethod
    def load(cls, spec: EngineSpec) -> SenseVoiceStreamingOnnxEngine:
        from workers.engines.sensevoice.onnx_engine import SenseVoiceOnnxEngine

        return cls(SenseVoiceOnnxEngine.load(spec), spec.redecode_window_s)
