"""The ASGI app: ``uvicorn gateway.app:app``.

The WebSocket endpoint at ``/`` speaks FunASR's protocol; an HTTP ``GET /`` gets the
browser page (``gateway/static``); ``POST /v1/transcribe`` decodes a whole file;
``/healthz``, ``/readyz`` and ``/metrics`` are for the operator. The lifespan starts the
worker pools (streaming; offline, VAD when configured) and stops them; on SIGTERM or Ctrl-C
it first drains the live sessions (see ``gateway.signals``).

The lifespan is ours rather than Starlette's so that a start-up failure reaches uvicorn as
one line (``ASR_MODEL=... is not in the local cache ...: set ASR_MODEL=...``), not as a
traceback: uvicorn logs the message of ``lifespan.startup.failed`` and exits with code 3.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from uvicorn.logging import DefaultFormatter

from gateway.access import ClientSessions, Refusal, check_handshake, check_status_access
from gateway.admission import Admission
from gateway.budget import BYTES_PER_SECOND, AudioBudget
from gateway.long_audio import transcribe_long
from gateway.metrics import GatewayMetrics
from gateway.server_log import quiet_client_faults
from gateway.session import CLOSE_GRACE_S, Session, close_with_error
from gateway.settings import GatewaySettings
from gateway.signals import SignalDrain
from gateway.transcribe import (
    Slots,
    TranscribeError,
    decode_wav,
    duration_s,
    read_audio,
    refusal_for,
)
from shared.errors import (
    GatewayError,
    OverCapacityError,
    ProtocolError,
    ShuttingDownError,
    WorkerLoadError,
)
from shared.gc_tuning import latency_tuned_gc
from shared.messages import StreamOptions, StreamResult
from shared.settings import PoolSettings
from workers.pool import WorkerPool, WorkerStatus

logger = logging.getLogger(__name__)

SUBPROTOCOL = "binary"  # what FunASR's clients offer
STATIC = Path(__file__).parent / "static"  # the browser page


class StartupError(Exception):
    """The gateway cannot start; the message says why and what to do, in one line."""


@dataclass(frozen=True, slots=True)
class _Serving:
    settings: GatewaySettings
    pool: WorkerPool
    admission: Admission
    clients: ClientSessions
    transcriptions: Slots
    offline_pool: WorkerPool | None  # ASR_OFFLINE_MODEL's, else None: `pool` decodes all
    vad_pool: WorkerPool | None  # ASR_VAD_MODEL's, else None: the energy endpointer
    budget: AudioBudget  # the audio all sessions hold in this process

    @property
    def whole_utterance_pool(self) -> WorkerPool:
        """Where the WebSocket `offline` mode and /v1/transcribe decode."""
        return self.offline_pool or self.pool

    @property
    def pools(self) -> list[WorkerPool]:
        return [pool for pool in (self.pool, self.offline_pool, self.vad_pool) if pool is not None]


class Gateway:
    """The ASGI app. Settings come from ``settings``, else from the environment at start-up."""

    def __init__(
        self,
        settings: GatewaySettings | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._settings = settings
        self._environ = environ
        self.metrics = GatewayMetrics()
        self._serving: _Serving | None = None
        self._router = Starlette(
            routes=[
                # Both at "/": a WebSocketRoute matches only websocket scopes, a Route only http.
                WebSocketRoute("/", self._websocket),
                Route("/", self._page),
                Mount("/static", StaticFiles(directory=STATIC), name="static"),
                Route("/healthz", self._healthz),
                Route("/readyz", self._readyz),
                Route("/metrics", self._metrics),
                Route("/v1/transcribe", self._transcribe, methods=["POST"]),
            ]
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        else:
            await self._router(scope, receive, send)

    # -- life cycle -------------------------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        started = False
        try:
            async with self._serve():
                started = True
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown
        except StartupError as exc:
            # uvicorn logs just this message; a test client raises the error itself.
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            raise
        except BaseException:
            failed = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
            await send({"type": failed, "message": traceback.format_exc()})
            raise
        await send({"type": "lifespan.shutdown.complete"})

    @asynccontextmanager
    async def _serve(self) -> AsyncIterator[None]:
        _show_our_logs()
        quiet_client_faults()  # uvicorn's logging is configured by now; frames come later
        try:
            settings = self._settings or GatewaySettings.from_env(self._environ)
        except ValueError as exc:
            raise StartupError(f"invalid settings: {exc}") from None
        admission = Admission(settings.max_sessions)
        pool = WorkerPool(settings.pool, on_result=self.metrics.observe_result)
        offline_pool = self._companion_pool(settings.offline_pool, "offline")
        vad_pool = self._companion_pool(settings.vad_pool, "vad")
        started: list[WorkerPool] = []
        try:
            for each in (pool, offline_pool, vad_pool):
                if each is not None:
                    await each.start()
                    started.append(each)
        except BaseException as exc:
            for each in reversed(started):
                await each.aclose()
            if isinstance(exc, WorkerLoadError):
                raise StartupError(exc.message) from None
            raise
        logger.info(
            "serving %s with the %s engine on %s (%d workers, %s transport)",
            pool.model.description if pool.model else settings.pool.model,
            pool.engine,
            ",".join(settings.pool.devices),
            len(settings.pool.worker_devices),
            settings.pool.transport,
        )
        if offline_pool is not None:
            logger.info(
                "offline decoding: %s (%d workers)%s",
                offline_pool.model.description if offline_pool.model else "",
                len(offline_pool.settings.worker_devices),
                f", punctuated by {offline_pool.settings.punc_model}"
                if offline_pool.settings.punc_model
                else "",
            )
        if vad_pool is not None:
            logger.info(
                "2pass sentence ends: %s (%d workers)",
                vad_pool.model.description if vad_pool.model else "",
                len(vad_pool.settings.worker_devices),
            )
        self.metrics.watch_workers(
            {
                prefix: each.status
                for prefix, each in (("", pool), ("offline", offline_pool), ("vad", vad_pool))
                if each is not None
            }
        )
        gc_tuning = latency_tuned_gc() if settings.gc_tuning else contextlib.nullcontext()
        try:
            with gc_tuning:
                async with anyio.create_task_group() as group:
                    clients = ClientSessions(settings.access.max_sessions_per_client)
                    slots = Slots(settings.transcribe.concurrency)
                    budget = AudioBudget(settings.max_buffered_bytes)
                    self.metrics.watch_budget(
                        lambda: budget.held / BYTES_PER_SECOND,
                        budget.max_bytes / BYTES_PER_SECOND,
                    )
                    self._serving = _Serving(
                        settings, pool, admission, clients, slots, offline_pool, vad_pool, budget
                    )
                    with SignalDrain() as signals:
                        group.start_soon(self._drain_on_signal, signals)
                        try:
                            yield
                        finally:
                            group.cancel_scope.cancel()
        finally:
            admission.expire()  # sessions still open (none, under uvicorn) close with 1012
            # Last started, first stopped: each pool's task group was entered in this task.
            for each in reversed(started):
                await each.aclose()
            self.metrics.watch_workers({})
            self._serving = None

    def _companion_pool(self, settings: PoolSettings | None, prefix: str) -> WorkerPool | None:
        """The offline or VAD pool, if configured; its workers' metrics are ``prefix-N``."""
        if settings is None:
            return None

        def observe(worker: int, result: StreamResult) -> None:
            self.metrics.observe_result(f"{prefix}-{worker}", result)

        return WorkerPool(settings, on_result=observe)

    async def drain(self, timeout: float | None = None) -> None:
        """Stop admitting sessions (new ones get 1012, ``/readyz`` 503), let the live ones
        finish their utterance for up to ``timeout`` seconds (default ``ASR_DRAIN_TIMEOUT``),
        then close the rest with 1012. SIGTERM and Ctrl-C call this before uvicorn's own
        shutdown; an embedding server may call it too."""
        serving = self._serving
        if serving is None:
            return
        admission = serving.admission
        timeout = serving.settings.drain_timeout_s if timeout is None else timeout
        logger.info("draining: %d live sessions, for at most %g s", admission.active, timeout)
        admission.start_drain()
        with anyio.move_on_after(timeout):
            await admission.wait_idle()
        if admission.active:
            logger.warning("drain timeout: closing %d sessions with 1012", admission.active)
            admission.expire()
            with anyio.move_on_after(CLOSE_GRACE_S):
                await admission.wait_idle()

    async def _drain_on_signal(self, signals: SignalDrain) -> None:
        await signals.received.wait()
        await self.drain()
        signals.hand_over()

    # -- WebSocket --------------------------------------------------------------------

    async def _websocket(self, websocket: WebSocket) -> None:
        serving = self._serving
        if serving is not None:
            # Keys and origin first: a refused handshake costs no session, no worker stream.
            refusal = check_handshake(
                serving.settings.access, websocket.headers, websocket.scope["query_string"]
            )
            if refusal is not None:
                reason = "unauthorized" if refusal.status == 401 else "forbidden_origin"
                self.metrics.sessions_refused.labels(reason).inc()
                await _deny(websocket, refusal)
                return
        offered = websocket.scope.get("subprotocols") or []
        await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        if serving is None:
            await close_with_error(websocket, ShuttingDownError("the server is not serving"))
            return
        client = websocket.client.host if websocket.client else "unknown"
        with contextlib.ExitStack() as places:
            try:
                serving.budget.check_room()
            except OverCapacityError as exc:
                self.metrics.sessions_refused.labels("audio_budget").inc()
                await close_with_error(websocket, exc)
                return
            try:
                places.enter_context(serving.clients.admit(client))
                # All places taken: wait for one up to ASR_ADMISSION_WAIT (0: refused now).
                waited_from, outcome = anyio.current_time(), "refused"
                try:
                    with self.metrics.admission_waiting.track_inprogress():
                        place = await serving.admission.wait_for_place(
                            serving.settings.admission_wait_s,
                            serving.settings.admission_queue_size,
                        )
                    outcome = "admitted"
                finally:
                    waited = anyio.current_time() - waited_from
                    self.metrics.admission_wait.labels(outcome).observe(waited)
                places.enter_context(place)
            except (ProtocolError, OverCapacityError, ShuttingDownError) as exc:
                self.metrics.sessions_refused.labels(_refusal_reason(exc)).inc()
                await close_with_error(websocket, exc)
                return
            places.enter_context(self.metrics.sessions_active.track_inprogress())
            self.metrics.sessions.inc()
            session = Session(
                websocket,
                serving.pool,
                serving.settings,
                serving.admission,
                self.metrics,
                offline_pool=serving.offline_pool,
                vad_pool=serving.vad_pool,
                budget=serving.budget,
            )
            await session.run()

    # -- HTTP -------------------------------------------------------------------------

    async def _page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def _healthz(self, request: Request) -> Response:
        """200 while the process serves or will again by itself (a worker restarting);
        503 once a pool cannot serve any more, so that a process manager restarts us."""
        serving = self._serving
        if serving is not None:
            for name, pool in (
                ("streaming", serving.pool),
                ("offline", serving.offline_pool),
                ("vad", serving.vad_pool),
            ):
                reason = pool.health if pool is not None else None
                if reason is not None:
                    return JSONResponse({"status": "failing", "pool": name, "reason": reason}, 503)
        return JSONResponse({"status": "ok"})

    async def _readyz(self, request: Request) -> Response:
        serving = self._serving
        if serving is None:
            return JSONResponse({"ready": False, "draining": False, "workers": []}, 503)
        draining = serving.admission.draining.is_set()
        ready = all(pool.ready for pool in serving.pools) and not draining
        status = 200 if ready else 503
        if _status_refusal(serving, request) is not None:
            # A load balancer's probe needs only the status code; the details need a key.
            return JSONResponse({"ready": ready, "draining": draining}, status)
        body = {
            "ready": ready,
            "draining": draining,
            "sessions": {
                "active": serving.admission.active,
                "max": serving.admission.max_sessions,
            },
            "workers": [_worker_json(worker) for worker in serving.pool.status()],
        }
        for name, companion in (("offline", serving.offline_pool), ("vad", serving.vad_pool)):
            if companion is not None:
                body[f"{name}_workers"] = [_worker_json(w) for w in companion.status()]
        return JSONResponse(body, status)

    async def _transcribe(self, request: Request) -> Response:
        """A whole file, decoded as one utterance (see ``gateway.transcribe``)."""
        serving = self._serving
        error: TranscribeError
        try:
            if serving is None or serving.admission.draining.is_set():
                raise TranscribeError(
                    503, "unavailable", "the server is not serving; try again later"
                )
            refusal = check_handshake(
                serving.settings.access, request.headers, request.scope["query_string"]
            )
            if refusal is not None:
                reason = "unauthorized" if refusal.status == 401 else "forbidden_origin"
                raise TranscribeError(refusal.status, reason, refusal.message)
            serving.transcriptions.take()
            try:
                return await self._transcribe_taken(request, serving)
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
        self.metrics.transcriptions.labels(str(error.status)).inc()
        self.metrics.transcription_refusals.labels(error.reason).inc()
        headers = {"Retry-After": "1"} if error.status == 429 else None
        body = {"error": {"status": error.status, "message": error.message}}
        return JSONResponse(body, error.status, headers)

    async def _transcribe_taken(self, request: Request, serving: _Serving) -> Response:
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
        self.metrics.transcriptions.labels("200").inc()
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

    async def _metrics(self, request: Request) -> Response:
        serving = self._serving
        refusal = _status_refusal(serving, request) if serving is not None else None
        if refusal is not None:
            body = {"error": {"status": refusal.status, "message": refusal.message}}
            return JSONResponse(body, refusal.status, {"WWW-Authenticate": "Bearer"})
        return Response(self.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _status_refusal(serving: _Serving, request: Request) -> Refusal | None:
    """ASR_PROTECT_STATUS: a refusal unless the request carries an API key."""
    return check_status_access(
        serving.settings.access, request.headers, request.scope["query_string"]
    )


def _worker_json(worker: WorkerStatus) -> dict[str, object]:
    return {
        "index": worker.index,
        "device": worker.device,
        "engine": worker.engine,
        "model": worker.model,
        "state": worker.state,
        "pid": worker.pid,
        "active_streams": worker.active_streams,
        "free_slots": worker.free_slots,
        "engine_streams": worker.engine_streams,
        "restarts": worker.restarts,
    }


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
        await websocket.close(1008, refusal.message[:120])


def _show_our_logs() -> None:
    """Print the gateway's and the pool's INFO logs (the drain, worker restarts) the way
    uvicorn prints its own, unless logging is configured (``--log-config``, pytest)."""
    if logging.getLogger().handlers:
        return
    for name in ("gateway", "workers"):
        package_logger = logging.getLogger(name)
        if package_logger.handlers:
            continue
        handler = logging.StreamHandler()
        handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
        package_logger.addHandler(handler)
        package_logger.setLevel(logging.INFO)
        package_logger.propagate = False


def create_app(
    settings: GatewaySettings | None = None, environ: Mapping[str, str] | None = None
) -> Gateway:
    """The gateway app; with no ``settings`` they are read from ``environ`` (default: the
    process environment) when the app starts, so that a bad value fails start-up in one line."""
    return Gateway(settings, environ)


app = create_app()
