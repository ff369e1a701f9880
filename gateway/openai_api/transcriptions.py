"""``POST /v1/audio/transcriptions`` and ``GET /v1/models``: OpenAI's file transcription,
so that ``OpenAI(base_url="http://HOST:PORT/v1", api_key=KEY)`` works unchanged.

The request is ``/v1/transcribe``'s upload with OpenAI's fields, read, checked, limited,
decoded and counted by the same code (``gateway.files.endpoint.serve_transcription``,
``gateway.files.request``): the same caps and refusals, each as OpenAI's JSON error
(``gateway.openai_api.errors``), in ``asr_transcriptions_total`` and
``asr_transcription_refusals_total`` like ``/v1/transcribe``'s. The answer is one of
OpenAI's formats (``gateway.openai_api.formats``). The fields:

=========================== ========================================================================
field                       here
=========================== ========================================================================
``file``                    WAV only, as ``/v1/transcribe`` (415 for anything else)
``model``                   required. Every id ``GET /v1/models`` lists, and OpenAI's own names
                            (``OPENAI_MODELS``: ``whisper-1``, ``gpt-4o-transcribe``, ...), are
                            decoded by the gateway's whole-file decoder (the offline pool when
                            ASR_OFFLINE_MODEL is set, else the streaming pool's model), so code
                            written for OpenAI runs unchanged; any other name is a 404
                            ``model_not_found``: a typo is told, not silently served
``response_format``         ``json`` (default), ``text``, ``srt``, ``vtt``, ``verbose_json``,
                            ``diarized_json`` (speakers told apart by CAM++, letters A, B ...;
                            needs a speaker model, else 400 ``no_speaker_model``)
``known_speaker_names[]``,  for ``diarized_json``: up to 4 names and 2-10 s WAV data URLs that
``known_speaker_references[]`` name the speakers they sound like
                            (``gateway.openai_api.known_speakers``); ignored by other formats
``timestamp_granularities`` ``segment`` and/or ``word``, for ``verbose_json`` (ignored otherwise,
                            as OpenAI documents them). ``word`` gives ``words`` from the model's
                            token times; a model without them (the checksum engine, a plain
                            Paraformer) gives an empty list rather than a 400: a client that
                            always asks for both still gets its segments, and an empty list says
                            truthfully that there are no word times
``prompt``, ``keywords[]``  OpenAI's free text and terms, never refused: the words in them that
                            fit a hotword bias a model that takes hotwords (SeACo-Paraformer),
                            the rest is dropped (``gateway.funasr.free_text``); any other model
                            ignores them, as a Whisper prompt would be by a model that has none
``languages[]``             accepted and dropped (the form reader reads past a field it is not
                            asked for)
``language``                a hint to a SenseVoiceSmall model (``zh``, ``en``, ``yue``, ``ja``,
                            ``ko``; another is ``auto``), ignored by other models; returned in
                            ``verbose_json`` unless the model says what it heard
``temperature``             accepted (a number, 0 to 1) and unused: nothing is sampled
``include[]``               ``logprobs`` accepted and ignored: no scores come from the workers
``chunking_strategy``       accepted, its value unused: long audio is always cut at pauses into
                            segments of at most ASR_MAX_SEGMENT_SECONDS (FSMN-VAD's speech
                            regions with ASR_VAD_MODEL, else the audio's energy), as ``auto``
                            would; ``server_vad``'s parameters are not taken
``stream``                  ``true``: server-sent events, whatever ``response_format`` says
                            (below)
``speakers`` (``spk``)      ours, funasr-server's ``spk``: ``verbose_json``'s segments each get
                            a ``speaker`` (CAM++, ``gateway.whole.speakers``); a 400 with
                            ``stream=true`` or from a model with no ASR_SPEAKER_MODEL
=========================== ========================================================================

``stream=true``: ``text/event-stream`` of ``data:`` lines, each one JSON event: a
``transcript.text.delta`` per segment with text, sent once that segment and every one before
it are decoded (in order: the segments are decoded at once, they may finish in any order),
then ``transcript.text.done`` with the whole text and ``usage``; the deltas joined are the done
text. The stream then ends with the response: no ``data: [DONE]``, which the SDK does not
need (its ``Stream`` ends with the body) and a client reading each ``data`` as JSON would
trip on. A failure once the stream has begun (the status was 200) is an event
``{"type": "error", "error": {...}}``, which the SDK's ``Stream`` raises as an ``APIError``
with its ``code``; it is counted in ``asr_transcription_refusals_total`` only (the status
counted is the 200 sent). The request's concurrency place is held until the stream ends.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import anyio
import numpy as np
import numpy.typing as npt
from anyio.streams.memory import MemoryObjectSendStream
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.audio.segment import Segment
from gateway.files.endpoint import (
    check_access,
    check_speakers,
    decode_upload,
    serve_transcription,
)
from gateway.files.multipart import Form
from gateway.files.request import (
    TranscribeError,
    duration_s,
    parse_itn_field,
    parse_speakers_field,
    read_upload,
    refusal_for,
)
from gateway.funasr.free_text import free_text_hotwords
from gateway.metrics import GatewayMetrics
from gateway.models.table import OPENAI_MODELS
from gateway.openai_api import known_speakers
from gateway.openai_api.errors import error_response, stream_error_event
from gateway.openai_api.event_stream import EventStream
from gateway.openai_api.formats import (
    GRANULARITIES,
    RESPONSE_FORMATS,
    FileTranscript,
    Granularity,
    ResponseFormat,
    TimedSegment,
    delta_event,
    done_event,
    render,
    sse,
)
from gateway.session.serving import ServedModel, Serving
from gateway.whole.long_audio import (
    DecodedSegment,
    decode_segments,
    file_segments,
    join_segments,
    pcm_of,
    speech_regions,
    transcribe_segments,
)
from gateway.whole.speakers import with_speakers
from shared.engines import Role
from shared.errors import GatewayError, UnknownModelError
from shared.messages import MAX_HOTWORDS, SPOKEN_LANGUAGES, SpeakerTurn, StreamOptions
from workers.pool import WorkerPool

logger = logging.getLogger(__name__)

FIELDS = frozenset(
    {
        "model",
        "language",
        "prompt",
        "keywords[]",
        "response_format",
        "timestamp_granularities[]",
        "temperature",
        "stream",
        "include[]",
        "itn",
        "speakers",
        "spk",
        known_speakers.NAMES,
    }
)
# The SDK sends a part per field and per list item (chunking_strategy's object as four
# ``chunking_strategy[...]`` parts, every keyword, every language): room for as many
# keywords as become hotwords, and the rest of the form.
MAX_PARTS = MAX_HOTWORDS + 64
INCLUDES = frozenset({"logprobs"})
OWNED_BY = "funasr"
STARTED = int(time.time())  # the models' ``created``: when this gateway loaded


@dataclass(frozen=True, slots=True)
class TranscriptionRequest:
    """What an OpenAI transcription request asks, checked (``parse_request``)."""

    model: str
    response_format: ResponseFormat = "json"
    granularities: tuple[Granularity, ...] = ("segment",)
    language: str = ""
    hotwords: tuple[str, ...] = ()
    stream: bool = False
    itn: bool = True  # ours: inverse text normalization, as OpenAI's models write numbers
    speakers: bool = False  # ours (funasr-server's spk): each segment's speaker


def parse_request(form: Form, served: Collection[str]) -> TranscriptionRequest:
    """The request's fields, or a 400 (a 404 for a model neither ``served`` nor OpenAI's)
    naming the one at fault."""
    model = (form.text("model") or "").strip()
    if not model:
        raise TranscribeError(400, "bad_model", "'model' is required: see GET /v1/models")
    if model not in served and model not in OPENAI_MODELS:
        raise _not_found(model)
    response_format = form.text("response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise TranscribeError(
            400,
            "bad_response_format",
            f"response_format {response_format!r} is not supported here; use one of"
            f" {', '.join(RESPONSE_FORMATS)}",
        )
    granularities = form.values("timestamp_granularities[]") or ("segment",)
    unknown = [value for value in granularities if value not in GRANULARITIES]
    if unknown:
        raise TranscribeError(
            400,
            "bad_timestamp_granularities",
            f"timestamp_granularities {unknown[0]!r} is not one of {', '.join(GRANULARITIES)}",
        )
    _check_temperature(form.text("temperature"))
    unknown = [value for value in form.values("include[]") if value not in INCLUDES]
    if unknown:
        raise TranscribeError(
            400, "bad_include", f"include {unknown[0]!r} is not one of {', '.join(INCLUDES)}"
        )
    return TranscriptionRequest(
        model=model,
        response_format=response_format,
        granularities=tuple(g for g in GRANULARITIES if g in granularities),
        language=(form.text("language") or "").strip(),
        hotwords=_hotwords(form),
        stream=_stream(form.text("stream")),
        itn=parse_itn_field(form.text("itn")),
        # diarized_json is who said what: speakers told apart, asked or not.
        speakers=_speakers(form) or response_format == "diarized_json",
    )


def _speakers(form: Form) -> bool:
    speakers = parse_speakers_field(form.text("speakers"), form.text("spk"))
    speakers = speakers or form.text("response_format") == "diarized_json"
    if speakers and _stream(form.text("stream")):
        raise TranscribeError(
            400,
            "bad_speakers",
            "speakers are labelled once the whole file is heard: not with stream=true",
        )
    return speakers


def _check_temperature(value: str | None) -> None:
    if value is None or not value.strip():
        return
    try:
        temperature = float(value)
    except ValueError:
        temperature = math.nan
    if not 0.0 <= temperature <= 1.0:  # NaN too
        raise TranscribeError(
            400, "bad_temperature", f"temperature {value!r} is not a number from 0 to 1"
        )


def _stream(value: str | None) -> bool:
    text = (value or "false").strip().lower()
    if text not in ("true", "false"):
        raise TranscribeError(400, "bad_stream", f"stream {value!r} is not true or false")
    return text == "true"


def _hotwords(form: Form) -> tuple[str, ...]:
    # OpenAI's prompt is free text: mined for hotwords, never refused (a 400 here would be
    # a failed turn in a voice agent for a sentence OpenAI takes).
    return free_text_hotwords(form.text("prompt"), form.values("keywords[]"))


# -- the models ---------------------------------------------------------------------------


def model_ids(serving: Serving) -> list[str]:
    """The models a request may name, the default first (``Serving.model_ids``)."""
    return serving.model_ids


def served_model(serving: Serving, name: str) -> ServedModel:
    """The model a request's ``model`` names (``Serving.model_for_request``), or a 404."""
    try:
        return serving.model_for_request(name)
    except UnknownModelError:
        raise _not_found(name) from None


def _not_found(name: str) -> TranscribeError:
    return TranscribeError(
        404,
        "model_not_found",
        f"the model {name!r} is not served here; GET /v1/models lists those that are"
        f" (OpenAI's names are taken too: {', '.join(sorted(OPENAI_MODELS))})",
    )


async def list_models(serving: Serving | None, request: Request) -> Response:
    """``GET /v1/models``: OpenAI's list shape; the key is needed as for a transcription."""
    try:
        serving = check_access(serving, request)
    except TranscribeError as refused:
        return error_response(refused)
    data = [
        {"id": name, "object": "model", "created": STARTED, "owned_by": OWNED_BY}
        for name in model_ids(serving)
    ]
    return JSONResponse({"object": "list", "data": data})


# -- the transcription ----------------------------------------------------------------------


async def create_transcription(
    serving: Serving | None, request: Request, metrics: GatewayMetrics
) -> Response:
    """A whole file in OpenAI's shape; every refusal a counted OpenAI error."""

    async def run(serving: Serving, request: Request) -> Response:
        return await _transcribe(serving, request, metrics)

    return await serve_transcription(serving, request, metrics, run=run, refuse=error_response)


async def _transcribe(serving: Serving, request: Request, metrics: GatewayMetrics) -> Response:
    settings = serving.settings
    form = await read_upload(request, settings.transcribe, FIELDS, MAX_PARTS, known_speakers.CAPS)
    asked = parse_request(form, model_ids(serving))
    model = served_model(serving, asked.model)
    check_speakers(model, asked.speakers)
    assert form.file is not None, "read_upload refuses a form without one"
    # Known speakers name diarized_json's speakers only: elsewhere they are not read.
    enrolment = known_speakers.Enrolment()
    if asked.response_format == "diarized_json":
        enrolment = await known_speakers.enrol(form, form.file, settings.max_session_s)
    samples = await decode_upload(serving, form.file)
    speech = None
    vad_pool = model.companion(Role.VAD)
    try:
        if asked.speakers:
            # One VAD pass: its regions cut the segments and feed the speakers.
            assert vad_pool is not None, "a speaker model needs a VAD model"
            speech = await speech_regions(vad_pool, pcm_of(samples))
        segments = await file_segments(
            samples,
            max_segment_bytes=settings.max_segment_bytes,
            vad_pool=vad_pool,
            energy_threshold=settings.endpoint.threshold,
            speech=speech,
        )
    except GatewayError as error:
        raise refusal_for(error) from None
    decode = _Decode(model.whole_utterance_pool, samples, segments, asked)
    if asked.stream:
        return EventStream(lambda send: decode.stream(send, metrics))
    turns, names = None, {}
    try:
        speaker_pool = model.companion(Role.SPEAKER)
        if speech is not None:
            assert speaker_pool is not None, "check_speakers refused the request"
            pieces, found = await with_speakers(
                decode.all, speaker_pool, speech, samples, enrolment.samples
            )
            turns = found.turns
            if asked.response_format == "diarized_json":
                # Off the event loop: against a thousand known speakers it takes tens of ms.
                names = await anyio.to_thread.run_sync(
                    known_speakers.names_of, found, enrolment, serving.known_speakers
                )
        else:
            pieces = await decode.all()
    except GatewayError as error:
        raise refusal_for(error) from None
    transcript = file_transcript(pieces, duration_s(samples), asked.language, turns, names)
    rendered = render(transcript, asked.response_format, asked.granularities)
    return Response(rendered.body, media_type=rendered.media_type)


def file_transcript(
    pieces: list[DecodedSegment],
    duration: float,
    language: str,
    turns: tuple[SpeakerTurn, ...] | None = None,
    names: Mapping[int, str] | None = None,
) -> FileTranscript:
    segments = tuple(
        TimedSegment(
            piece.start_ms,
            piece.end_ms,
            piece.transcript.text,
            piece.transcript.timestamps,
            piece.transcript.sentences,  # a cue and a segment each, where there are any
        )
        for piece in pieces
    )
    joined = join_segments(pieces)
    # The language the model heard (SenseVoice), else the request's as given.
    heard = joined.tags.language if joined.tags is not None and joined.tags.language else ""
    return FileTranscript(joined.text, duration, heard or language, segments, turns, names or {})


@dataclass(frozen=True, slots=True)
class _Decode:
    pool: WorkerPool
    samples: npt.NDArray[np.int16]
    segments: list[Segment]
    asked: TranscriptionRequest

    @property
    def options(self) -> StreamOptions:
        # OpenAI's language is a hint in ISO-639-1; one SenseVoice does not take (or none)
        # is "auto", as funasr's generate takes it; other models ignore it.
        language = self.asked.language if self.asked.language in SPOKEN_LANGUAGES else "auto"
        return StreamOptions(
            hotwords=self.asked.hotwords,
            itn=self.asked.itn,
            language=language,
            model_itn=self.asked.itn,
        )

    async def all(self) -> list[DecodedSegment]:
        return await transcribe_segments(self.pool, self.samples, self.segments, self.options)

    async def stream(self, send: MemoryObjectSendStream[bytes], metrics: GatewayMetrics) -> None:
        """The events of ``stream=true`` into ``send``; a failure as an ``error`` event."""
        texts: list[str] = []
        try:
            async with decode_segments(
                self.pool, self.samples, self.segments, self.options
            ) as decodes:
                async for piece in decodes:
                    text = piece.transcript.text
                    if text:
                        await send.send(sse(delta_event(" " + text if texts else text)))
                        texts.append(text)
        except GatewayError as failure:
            await _send_error(send, refusal_for(failure), metrics)
            return
        except Exception as exc:  # a bug: one log line, and the client is told
            logger.error("POST /v1/audio/transcriptions stream failed: %r", exc)
            error = TranscribeError(500, "internal", "the server failed; see its log")
            await _send_error(send, error, metrics)
            return
        await send.send(sse(done_event(" ".join(texts), duration_s(self.samples))))


async def _send_error(
    send: MemoryObjectSendStream[bytes], error: TranscribeError, metrics: GatewayMetrics
) -> None:
    metrics.transcription_refusals.labels(error.reason).inc()
    await send.send(sse(stream_error_event(error)))
