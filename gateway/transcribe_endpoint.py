"""``POST /v1/transcribe``: the request's checks, its place, the decode, the JSON answer
(the request's audio and its refusals: ``gateway.transcribe``)."""

from __future__ import annotations

import logging
import traceback

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.access import check_handshake
from gateway.long_audio import transcribe_long
from gateway.metrics import GatewayMetrics
from gateway.serving import Serving
from gateway.transcribe import TranscribeError, decode_wav, duration_s, read_audio, refusal_for
from shared.errors import GatewayError
from shared.messages import StreamOptions

logger = logging.getLogger(__name__)


async def transcribe(
    serving: Serving | None, request: Request, metrics: GatewayMetrics
) -> Response:
    """A whole file, decoded as one utterance; every refusal a counted JSON error."""
    error: TranscribeError
    try:
        if serving is None or serving.admission.draining.is_set():
            raise TranscribeError(503, "unavailable", "the server is not serving; try again later")
        refusal = check_handshake(
            serving.settings.access, request.headers, request.scope["query_string"]
        )
        if refusal is not None:
            reason = "unauthorized" if refusal.status == 401 else "forbidden_origin"
            raise TranscribeError(refusal.status, reason, refusal.message)
        serving.transcriptions.take()
        try:
            return await _transcribe_taken(serving, request, metrics)
        finally:
            serving.transcriptions.give()
    except TranscribeError as refused:
        error = refused
    except Exception as exc:  # a bug: counted, one log line, still a JSON answer
        where = traceback.extract_tb(exc.__traceback__)[-1]
        logger.error(
            "POST /v1/transcribe failed at %s:%s: %s: %s",
            where.filename,
            where.lineno,
            type(exc).__name__,
            exc,
        )
        error = TranscribeError(500, "internal", "the server failed; see its log")
    metrics.transcriptions.labels(str(error.status)).inc()
    metrics.transcription_refusals.labels(error.reason).inc()
    headers = {"Retry-After": "1"} if error.status == 429 else None
    body = {"error": {"status": error.status, "message": error.message}}
    return JSONResponse(body, error.status, headers)


async def _transcribe_taken(
    serving: Serving, request: Request, metrics: GatewayMetrics
) -> Response:
    settings = serving.settings
    audio = await read_audio(request, settings.transcribe)  # capped as it arrives
    samples = await anyio.to_thread.run_sync(decode_wav, audio.data, settings.max_session_s)
    options = StreamOptions(hotwords=audio.hotwords)
    try:
        # Longer than ASR_MAX_SEGMENT_SECONDS: in segments cut at pauses, then joined.
        transcript = await transcribe_long(
            serving.whole_utterance_pool,
            samples,
            options,
            max_segment_bytes=settings.max_segment_bytes,
            vad_pool=serving.vad_pool,
            energy_threshold=settings.endpoint.threshold,
        )
    except GatewayError as error:
        raise refusal_for(error) from None
    metrics.transcriptions.labels("200").inc()
    decoder = serving.whole_utterance_pool
    body: dict[str, object] = {
        "text": transcript.text,
        "duration_s": duration_s(samples),
        "source": audio.source,
        "model": decoder.model.description if decoder.model else "",
        "engine": decoder.engine,
    }
    if transcript.timestamps:  # the model predicts them: ms per token, as [start, end]
        body["timestamps"] = [list(pair) for pair in transcript.timestamps]
    return JSONResponse(body)
