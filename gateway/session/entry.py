"""The WebSocket endpoint at ``/``: the handshake's checks (keys, origin), the model
(``?model=NAME``: a name not served is refused before anything is taken), the places a
session takes (the audio budget, the per-client cap, one of ``ASR_MAX_SESSIONS``, waiting
for it when ``ASR_ADMISSION_WAIT`` says so, and one of its model's own), then the session
itself; or a resume (``?resume=TOKEN``, or a first frame that asks for one), which takes no
place: its session has one, and stays on its model whatever the URL says."""

from __future__ import annotations

import contextlib
from urllib.parse import parse_qs

import anyio
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from gateway.funasr.parser import ResumeRequested
from gateway.limits.access import Refusal, check_handshake
from gateway.metrics import GatewayMetrics
from gateway.session.closing import close_reason, close_with_error
from gateway.session.resume.resumes import ResumeQuery, owner_of, resume_query
from gateway.session.serving import ServedModel, Serving
from gateway.session.session import Session
from shared.errors import (
    CLOSE_POLICY_VIOLATION,
    GatewayError,
    OverCapacityError,
    ProtocolError,
    ResumeError,
    ResumeExpiredError,
    ShuttingDownError,
)

SUBPROTOCOL = "binary"  # what FunASR's clients offer
MODEL_QUERY_PARAMETER = "model"


async def serve_websocket(
    serving: Serving | None, websocket: WebSocket, metrics: GatewayMetrics
) -> None:
    if serving is not None:
        refusal = refused_handshake(serving, websocket, metrics)
        if refusal is not None:
            await _deny(websocket, refusal)
            return
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    if serving is None:
        await close_with_error(websocket, ShuttingDownError("the server is not serving"))
        return
    query_string = websocket.scope["query_string"]
    owner = owner_of(serving.settings.access, websocket.headers, query_string)
    try:
        resume = resume_query(query_string)
    except ProtocolError as exc:
        await close_with_error(websocket, exc)
        return
    if resume is None:
        try:
            model = asked_model(serving, query_string)
        except ProtocolError as exc:
            metrics.sessions_refused.labels("unknown_model").inc()
            await close_with_error(websocket, exc)
            return
        request = await serve_new_session(serving, websocket, metrics, owner, model)
        if request is None:
            return
        resume = ResumeQuery(request.token, request.last_result)
    await _resume_session(serving, websocket, metrics, resume, owner)


def asked_model(serving: Serving, query_string: bytes) -> ServedModel | None:
    """The model ``?model=NAME`` names (None: the URL names none), or ``UnknownModelError``."""
    names = parse_qs(query_string.decode("latin-1")).get(MODEL_QUERY_PARAMETER)
    return None if not names else serving.model(names[0])


async def serve_new_session(
    serving: Serving,
    websocket: WebSocket,
    metrics: GatewayMetrics,
    owner: str,
    model: ServedModel | None = None,
) -> ResumeRequested | None:
    """Admit and serve a session, on ``model`` (None: the first config's, else the
    default); its first frame may ask to resume another instead."""
    client = websocket.client.host if websocket.client else "unknown"
    with contextlib.ExitStack() as places:
        try:
            serving.budget.check_room()
        except OverCapacityError as exc:
            metrics.sessions_refused.labels("audio_budget").inc()
            await close_with_error(websocket, exc)
            return None
        try:
            places.enter_context(serving.clients.admit(client))
            # All places taken: wait for one up to ASR_ADMISSION_WAIT (0: refused now).
            waited_from, outcome = anyio.current_time(), "refused"
            try:
                with metrics.admission_waiting.track_inprogress():
                    place = await serving.admission.wait_for_place(
                        serving.settings.admission_wait_s,
                        serving.settings.admission_queue_size,
                    )
                outcome = "admitted"
            finally:
                waited = anyio.current_time() - waited_from
                metrics.admission_wait.labels(outcome).observe(waited)
            places.enter_context(place)
        except (ProtocolError, OverCapacityError, ShuttingDownError) as exc:
            metrics.sessions_refused.labels(_refusal_reason(exc)).inc()
            await close_with_error(websocket, exc)
            return None
        if model is not None:
            try:
                places.enter_context(model.take_places(serving.admission))
            except OverCapacityError as exc:
                metrics.sessions_refused.labels("model_full").inc()
                await close_with_error(websocket, exc)
                return None
        places.enter_context(metrics.sessions_active.track_inprogress())
        metrics.sessions.inc()
        return await Session(websocket, serving, metrics, owner, client, model).run()


async def _resume_session(
    serving: Serving,
    websocket: WebSocket,
    metrics: GatewayMetrics,
    resume: ResumeQuery,
    owner: str,
) -> None:
    """Hand the connection to the session its token names, and wait until the session is
    done with it; or close it with the reason it cannot resume."""
    try:
        session, claim = serving.resumes.find(resume.token)
        attachment = session.attach(websocket, claim, resume.last_result, owner)
    except ResumeError as exc:
        error: GatewayError = exc
        outcome = exc.outcome
        if isinstance(exc, ResumeExpiredError) and serving.admission.draining.is_set():
            # Its session was closed by the drain: say so, as a new session would be told.
            error = ShuttingDownError("the server is shutting down; the session is closed")
            outcome = "draining"
        metrics.resumes.labels(outcome).inc()
        await close_with_error(websocket, error)
        return
    # Counted as "resumed" by the session once it serves the connection: a later resume
    # may displace this one first.
    await attachment.released.wait()
    if attachment.refusal is not None:
        metrics.resumes.labels(attachment.refusal.outcome).inc()
        await close_with_error(websocket, attachment.refusal)


def refused_handshake(
    serving: Serving, websocket: WebSocket, metrics: GatewayMetrics
) -> Refusal | None:
    """Keys and origin, checked first: a refused handshake costs no session, no worker
    stream. A refusal is counted; the caller answers it in its dialect."""
    refusal = check_handshake(
        serving.settings.access, websocket.headers, websocket.scope["query_string"]
    )
    if refusal is not None:
        reason = "unauthorized" if refusal.status == 401 else "forbidden_origin"
        metrics.sessions_refused.labels(reason).inc()
    return refusal


def _refusal_reason(error: Exception) -> str:
    match error:
        case OverCapacityError():
            return "over_capacity"
        case ShuttingDownError():
            return "draining"
        case _:
            return "client_cap"


async def _deny(websocket: WebSocket, refusal: Refusal) -> None:
    """Answer the handshake with an HTTP error and a JSON reason, where the server can
    (uvicorn can); else refuse it bare (uvicorn answers 403)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        body = {"type": "error", "code": refusal.status, "message": refusal.message}
        headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
        await websocket.send_denial_response(JSONResponse(body, refusal.status, headers))
    else:
        await websocket.close(CLOSE_POLICY_VIOLATION, close_reason(refusal.message))
