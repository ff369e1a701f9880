"""``POST /v1/transcribe``: the request's checks, its place, the decode, the JSON answer
(the request's audio and its refusals: ``gateway.files.request``).

``serve_transcription`` is the part every file endpoint shares (OpenAI's
``/v1/audio/transcriptions`` too, ``gateway.openai_api.transcriptions``): draining and
readiness (503), the key and the origin (401, 403), a place among
``ASR_TRANSCRIBE_CONCURRENCY`` (429), the work cancelled and the place given back the
moment the client leaves (499, ``gateway.files.disconnect``), one log line for a bug
(500), and the counts
(``asr_transcriptions_total{status}``, ``asr_transcription_refusals_total{reason}``); each
endpoint brings what it runs and how it words a refusal.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial

import anyio
import numpy as np
import numpy.typing as npt
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from gateway.audio.segment import Speech
from gateway.files.disconnect import while_connected
from gateway.files.request import TranscribeError, decode_wav, duration_s, read_audio, refusal_for
from gateway.funasr.corrections import Corrections, split_hotwords
from gateway.funasr.results import stamp_sent, tag_fields
from gateway.funasr.speaker_labels import turns_json
from gateway.limits.access import check_handshake
from gateway.limits.admission import Place
from gateway.metrics import GatewayMetrics
from gateway.session.serving import ServedModel, Serving
from gateway.whole.long_audio import pcm_of, speech_regions, transcribe_long
from gateway.whole.speakers import speakers_of, with_speaker_turns
from shared.engines import Role
from shared.errors import GatewayError, UnknownModelError
from shared.messages import Decoded, SpeakerTurn, StreamOptions

logger = logging.getLogger(__name__)

Run = Callable[[Serving, Request], Awaitable[Response]]
Refuse = Callable[[TranscribeError], Response]


class HeldResponse(StreamingResponse):
    """A streamed answer that keeps the request's place until its last byte is sent (or
    the client is gone): ``serve_transcription`` hands the place to it rather than giving
    it back when ``run`` returns."""

    place: Place | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.place is not None:
                self.place.release()


def check_access(serving: Serving | None, request: Request) -> Serving:
    """The serving app, unless it is not (503) or the request may not use it: no key or a
    wrong one (401), a foreign ``Origin`` (403); as for a WebSocket handshake."""
    if serving is None or serving.admission.draining.is_set():
        raise TranscribeError(503, "unavailable", "the server is not serving; try again later")
    refusal = check_handshake(
        serving.settings.access, request.headers, request.scope["query_string"]
    )
    if refusal is not None:
        reason = "unauthorized" if refusal.status == 401 else "forbidden_origin"
        raise TranscribeError(refusal.status, reason, refusal.message)
    return serving


async def serve_transcription(
    serving: Serving | None,
    request: Request,
    metrics: GatewayMetrics,
    *,
    run: Run,
    refuse: Refuse,
) -> Response:
    """``run``'s answer, counted; every refusal counted and answered by ``refuse``."""
    error: TranscribeError
    try:
        serving = check_access(serving, request)
        limiter = serving.transcriptions
        client = request.client.host if request.client else "unknown"
        refused = limiter.try_take(client)
        if refused == "busy":
            raise TranscribeError(
                429,
                "busy",
                f"{limiter.limit} transcriptions are running (ASR_TRANSCRIBE_CONCURRENCY);"
                " try again later",
            )
        if refused == "client_share":
            raise TranscribeError(
                429,
                "busy",
                f"{limiter.per_client} transcriptions of {client} are running"
                " (ASR_TRANSCRIBE_CONCURRENCY_PER_CLIENT); try again later",
            )
        place = Place(lambda: limiter.give(client))
        try:
            response = await while_connected(request, partial(run, serving))
        except BaseException:
            place.release()
            raise
        if isinstance(response, HeldResponse):
            response.place = place  # given back when its stream ends
        else:
            place.release()
        metrics.transcriptions.labels(str(response.status_code)).inc()
        return response
    except TranscribeError as refused:
        # Without its traceback: kept in this frame, it would be a cycle through the frames
        # it was raised in (the multipart reader's, holding the file read so far), which
        # only the rarely run cyclic collector frees.
        error = refused.with_traceback(None)
    except Exception as exc:  # a bug: counted, one log line, still a JSON answer
        where = traceback.extract_tb(exc.__traceback__)[-1]
        logger.error(
            "POST %s failed at %s:%s: %s: %s",
            request.url.path,
            where.filename,
            where.lineno,
            type(exc).__name__,
            exc,
        )
        error = TranscribeError(500, "internal", "the server failed; see its log")
    metrics.transcriptions.labels(str(error.status)).inc()
    metrics.transcription_refusals.labels(error.reason).inc()
    return refuse(error)


async def decode_upload(serving: Serving, data: bytes) -> npt.NDArray[np.int16]:
    """A file's audio as 16 kHz mono int16, checked and resampled off the event loop."""
    return await anyio.to_thread.run_sync(decode_wav, data, serving.settings.max_session_s)


def chosen_model(serving: Serving, name: str | None) -> ServedModel:
    """The model a request names (None: the default; OpenAI's names too, as on OpenAI's
    endpoint); a name not served is a 404."""
    try:
        return serving.default if name is None else serving.model_for_request(name)
    except UnknownModelError as error:
        raise TranscribeError(404, "unknown_model", error.message) from None


async def transcribe_file(
    serving: Serving,
    model: ServedModel,
    samples: npt.NDArray[np.int16],
    options: StreamOptions,
    speech: Speech | None = None,
) -> Decoded:
    """The whole file's transcript by ``model``; longer than ASR_MAX_SEGMENT_SECONDS, in
    segments cut at pauses (``speech``'s, where the VAD was asked already), then joined."""
    settings = serving.settings
    try:
        return await transcribe_long(
            model.whole_utterance_pool,
            samples,
            options,
            max_segment_bytes=settings.max_segment_bytes,
            vad_pool=model.companion(Role.VAD),
            energy_threshold=settings.endpoint.threshold,
            speech=speech,
        )
    except GatewayError as error:
        raise refusal_for(error) from None


def check_speakers(model: ServedModel, speakers: bool) -> None:
    """Speakers asked of a model that has no speaker model: a 400, before the decode."""
    if speakers and model.companion(Role.SPEAKER) is None:
        raise TranscribeError(
            400,
            "no_speaker_model",
            f"model {model.name!r} labels no speakers: the server has no ASR_SPEAKER_MODEL",
        )


async def transcribe_with_speakers(
    serving: Serving,
    model: ServedModel,
    samples: npt.NDArray[np.int16],
    options: StreamOptions,
    speakers: bool,
) -> tuple[Decoded, tuple[SpeakerTurn, ...] | None]:
    """The transcript, and where asked the speaker turns, found at the same time (the
    speaker pool's workers are not the decoder's); its text corrected by the hotwords'
    rules and pinyin (``gateway.funasr.corrections``), which never reach the model."""
    corrections = Corrections.of(options.hotwords, serving.hotword_rules)
    options = replace(options, hotwords=split_hotwords(options.hotwords)[0])
    turns: tuple[SpeakerTurn, ...] | None = None
    if not speakers:
        transcript = await transcribe_file(serving, model, samples, options)
    else:
        speaker_pool, vad_pool = model.companion(Role.SPEAKER), model.companion(Role.VAD)
        assert speaker_pool is not None, "check_speakers refused the request"
        assert vad_pool is not None, "a speaker model needs a VAD model (the settings say so)"
        try:
            # One VAD pass: its regions cut the segments and feed the speakers.
            speech = await speech_regions(vad_pool, pcm_of(samples))
            transcript, turns = await with_speaker_turns(
                lambda: transcribe_file(serving, model, samples, options, speech),
                speaker_pool,
                speech,
                samples,
            )
        except GatewayError as error:
            raise refusal_for(error) from None
    if corrections:
        transcript = replace(transcript, text=corrections.apply(transcript.text))
    return transcript, turns


async def transcribe(
    serving: Serving | None, request: Request, metrics: GatewayMetrics
) -> Response:
    """A whole file, decoded as one utterance; every refusal a counted JSON error."""
    return await serve_transcription(
        serving, request, metrics, run=_transcribe_taken, refuse=_refusal
    )


def _refusal(error: TranscribeError) -> Response:
    headers = {"Retry-After": "1"} if error.status in (429, 503) else None
    body = {"error": {"status": error.status, "message": error.message}}
    return JSONResponse(body, error.status, headers)


async def _transcribe_taken(serving: Serving, request: Request) -> Response:
    audio = await read_audio(request, serving.settings.transcribe)  # capped as it arrives
    model = chosen_model(serving, audio.model)
    check_speakers(model, audio.speakers)
    samples = await decode_upload(serving, audio.data)
    # One itn for files: wetext's for a Paraformer, SenseVoice's own for SenseVoice.
    options = StreamOptions(
        hotwords=audio.hotwords, itn=audio.itn, language=audio.language, model_itn=audio.itn
    )
    transcript, turns = await transcribe_with_speakers(
        serving, model, samples, options, audio.speakers
    )
    decoder = model.whole_utterance_pool
    body: dict[str, object] = {
        "text": transcript.text,
        "duration_s": duration_s(samples),
        "source": audio.source,
        "model": decoder.model.description if decoder.model else "",
        "served_model": model.name,
        "engine": decoder.engine,
    }
    if transcript.timestamps:  # the model predicts them: ms per token, as [start, end]
        body["timestamps"] = [list(pair) for pair in transcript.timestamps]
    if transcript.sentences:
        # FunASR's C++ server's stamp_sents, its five fields, in ms from the file's start
        # (each segment's moved to where it starts, as stamp_sents are). Absent, as
        # stamp_sents is there, when the model predicts no token times: not [], which
        # would read as "times, but no sentence in them".
        sentences: list[dict[str, object]] = [stamp_sent(s) for s in transcript.sentences]
        if turns is not None:  # funasr's sentence_info's "spk" on each sentence
            for sentence, speaker in zip(
                sentences, speakers_of(transcript.sentences, turns), strict=True
            ):
                sentence["spk"] = speaker
        body["sentences"] = sentences
    if turns is not None:
        body["speakers"] = turns_json(turns)  # who spoke when, the sentences' labels' source
    if transcript.tags is not None:  # SenseVoice's: the language heard, emotion, event
        body.update(tag_fields(transcript.tags))
    return JSONResponse(body)
