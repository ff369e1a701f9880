"""The ASGI app: ``python -m gateway`` (or ``uvicorn gateway.app:app``).

The WebSocket endpoint at ``/`` speaks FunASR's protocol (``gateway.session.entry``,
then ``gateway.session.session``); an HTTP ``GET /`` gets the browser page (``gateway/static``);
``POST /v1/transcribe`` decodes a whole file (``gateway.files.endpoint``); OpenAI's
``/v1/audio/transcriptions``, ``/v1/models`` and ``/v1/realtime`` are ``gateway.openai_api``;
Deepgram's live ``/v1/listen`` is ``gateway.deepgram``;
``/healthz``, ``/readyz`` and ``/metrics`` are for the operator (``gateway.ops.status``). The
lifespan starts the worker pools (streaming; offline, VAD when configured) and stops them.
``drain`` lets the live sessions finish first: ``python -m gateway``'s server calls it on
SIGTERM or Ctrl-C (``gateway.ops.server``); under bare uvicorn the lifespan wraps uvicorn's
signal handlers to the same end (``gateway.ops.signals``, the fallback).

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
from functools import partial
from pathlib import Path

import anyio
from anyio.abc import SocketStream
from anyio.streams.stapled import MultiListener
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket
from uvicorn.logging import DefaultFormatter

from gateway.audio.pcm import BYTES_PER_SECOND
from gateway.deepgram.dialect import serve_listen
from gateway.files.endpoint import transcribe
from gateway.funasr.corrections import Rule, load_hotword_rules
from gateway.funasr.known_speakers import KnownSpeaker
from gateway.funasr.speaker_file import load_speakers
from gateway.limits.access import ClientSessions
from gateway.limits.admission import Admission
from gateway.limits.budget import AudioBudget
from gateway.limits.transcriptions import TranscriptionLimiter
from gateway.metrics import GatewayMetrics
from gateway.openai_api import transcriptions as openai_transcriptions
from gateway.openai_api.realtime.dialect import serve_realtime
from gateway.ops import status
from gateway.ops.agent import DEFAULT_HOST, Capacity, serve_agent
from gateway.ops.gpu_memory import GpuMemory
from gateway.ops.main_port_log import bounded_accept_reports
from gateway.ops.page import PageFiles
from gateway.ops.secret_log import keep_secrets_out_of_logs
from gateway.ops.server_log import quiet_client_faults
from gateway.ops.side_tasks import keep_running
from gateway.ops.signals import SignalDrain
from gateway.pools import ModelLoadError, served_models
from gateway.session.closing import CLOSE_GRACE_S
from gateway.session.entry import serve_websocket
from gateway.session.resume.resumes import ResumableSessions
from gateway.session.serving import ServedModel, Serving
from gateway.settings import GatewaySettings
from shared.gc_tuning import latency_tuned_gc

logger = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"  # the browser page


class StartupError(Exception):
    """The gateway cannot start; the message says why and what to do, in one line."""


class Gateway:
    """The ASGI app. Settings come from ``settings``, else from the environment at start-up.
    ``wrap_signals``: drain on uvicorn's SIGTERM and SIGINT by wrapping its handlers (bare
    uvicorn's fallback); off when the server calls ``drain`` itself (``gateway.ops.server``).
    ``server_host``: the address the server listens on, where the agent listens too unless
    ``ASR_AGENT_HOST`` says otherwise (``python -m gateway`` passes its ``--host``)."""

    def __init__(
        self,
        settings: GatewaySettings | None = None,
        environ: Mapping[str, str] | None = None,
        *,
        wrap_signals: bool = True,
        server_host: str | None = None,
    ) -> None:
        self._settings = settings
        self._environ = environ
        self._wrap_signals = wrap_signals
        self._server_host = server_host
        self.metrics = GatewayMetrics()
        self._serving: Serving | None = None
        # Why the app does not serve (/healthz's 503), None while it does; ``_lost``: the
        # fault that ended serving while the server still runs.
        self._stopped: str | None = "not started"
        self._lost: str | None = None
        self._page_files = PageFiles(STATIC)
        self._gpu_memory = GpuMemory()
        self._router = Starlette(
            routes=[
                # Both at "/": a WebSocketRoute matches only websocket scopes, a Route only http.
                WebSocketRoute("/", self._websocket),
                Route("/", self._page),
                Route("/static/{name:path}", self._static),
                Route("/healthz", self._healthz),
                Route("/readyz", self._readyz),
                Route("/metrics", self._metrics),
                Route("/v1/transcribe", self._transcribe, methods=["POST"]),
                # The OpenAI dialect (gateway.openai_api): OpenAI's SDK with base_url=.../v1.
                Route("/v1/audio/transcriptions", self._openai_transcribe, methods=["POST"]),
                Route("/v1/models", self._openai_models),
                WebSocketRoute("/v1/realtime", self._openai_realtime),
                # Deepgram's live API (gateway.deepgram): its SDK and plugins with base_url.
                WebSocketRoute("/v1/listen", self._deepgram_listen),
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
        keep_secrets_out_of_logs()
        try:
            settings = self._settings or GatewaySettings.from_env(self._environ)
            # Read before any model loads: a bad file stops the start at once, naming its line.
            hotword_rules = load_hotword_rules(settings.hotword_rules_file)
            known_speakers = load_speakers(settings.speakers_file)
        except ValueError as exc:
            raise StartupError(f"invalid settings: {exc}") from None
        try:
            # Every model's pools: loaded at once, stopped when serving ends.
            async with (
                served_models(settings.model_table, self.metrics) as models,
                self._serve_models(settings, models, hotword_rules, known_speakers),
            ):
                yield
        except ModelLoadError as exc:
            raise StartupError(str(exc)) from None

    @asynccontextmanager
    async def _serve_models(
        self,
        settings: GatewaySettings,
        models: dict[str, ServedModel],
        hotword_rules: tuple[Rule, ...],
        known_speakers: tuple[KnownSpeaker, ...],
    ) -> AsyncIterator[None]:
        admission = Admission(settings.max_sessions)
        for model in models.values():
            places = model.places
            self.metrics.model_sessions_max.labels(model.name).set(
                places.max_sessions or settings.max_sessions
            )
            self.metrics.model_sessions_active.labels(model.name).set_function(
                partial(getattr, places, "active")
            )
        gc_tuning = latency_tuned_gc() if settings.gc_tuning else contextlib.nullcontext()
        agent: MultiListener[SocketStream] | None = None
        try:
            with gc_tuning, bounded_accept_reports():
                agent = await self._agent_listener(
                    settings.agent_port, settings.agent_host or self._server_host or DEFAULT_HOST
                )
                # Side tasks: a fault of theirs is logged and they start again; it must not
                # end serving (gateway.ops.side_tasks).
                async with anyio.create_task_group() as group:
                    if agent is not None:
                        answer = partial(serve_agent, agent, self._capacity)
                        group.start_soon(keep_running, "the agent check", answer)
                    clients = ClientSessions(settings.access.max_sessions_per_client)
                    limiter = TranscriptionLimiter(
                        settings.transcribe.concurrency, settings.transcribe.concurrency_per_client
                    )
                    self.metrics.transcriptions_active.set_function(lambda: limiter.busy)
                    budget = AudioBudget(settings.max_buffered_bytes)
                    self.metrics.watch_budget(
                        lambda: budget.held / BYTES_PER_SECOND,
                        budget.max_bytes / BYTES_PER_SECOND,
                    )
                    self.metrics.sessions_max.set(settings.max_sessions)
                    resumes = ResumableSessions(
                        settings.replica_id,
                        settings.resume_window_s,
                        settings.max_parked_sessions,
                        settings.max_parked_per_client,
                    )
                    self._serving = Serving(
                        settings,
                        models,
                        admission,
                        clients,
                        limiter,
                        budget,
                        resumes,
                        hotword_rules,
                        known_speakers,
                    )
                    signals = SignalDrain() if self._wrap_signals else None
                    with signals or contextlib.nullcontext():
                        if signals is not None:
                            drain = partial(self._drain_on_signal, signals)
                            group.start_soon(keep_running, "the drain on a signal", drain)
                        self._stopped = None
                        try:
                            yield
                        finally:
                            group.cancel_scope.cancel()
        except BaseException as exc:
            if self._stopped is None:  # it was serving: /healthz and the server must know
                self._stopped = self._lost = f"serving ended: {_first_error(exc)}"
            raise
        finally:
            if self._stopped is None:
                self._stopped = "shutting down"
            if agent is not None:
                await agent.aclose()
            admission.expire()  # sessions still open (none, under uvicorn) close with 1012
            self._serving = None

    async def drain(self, timeout: float | None = None) -> None:
        """Tell the balancers (``/readyz`` 503, the agent's ``drain``), wait
        ``ASR_DRAIN_DELAY`` while still admitting, then stop admitting sessions (new ones
        get 1012), let the live ones
        finish their utterance for up to ``timeout`` seconds (default ``ASR_DRAIN_TIMEOUT``),
        then close the rest with 1012. SIGTERM and Ctrl-C call this before uvicorn's own
        shutdown (``gateway.ops.server``, or ``gateway.ops.signals`` under bare uvicorn); an
        embedding server may call it too."""
        serving = self._serving
        if serving is None:
            return
        admission = serving.admission
        timeout = serving.settings.drain_timeout_s if timeout is None else timeout
        delay = serving.settings.drain_delay_s
        admission.announce_drain()
        if delay > 0 and not admission.draining.is_set():
            # /readyz and the agent say "draining" now; sessions that reach us before the
            # balancer has looked again are still served (ASR_DRAIN_DELAY).
            logger.info("draining in %g s: /readyz and the agent say so from now", delay)
            await anyio.sleep(delay)
        logger.info("draining: %d live sessions, for at most %g s", admission.active, timeout)
        admission.start_drain()
        with anyio.move_on_after(timeout):
            await admission.wait_idle()
        if admission.active:
            logger.warning("drain timeout: closing %d sessions with 1012", admission.active)
            admission.expire()
            with anyio.move_on_after(CLOSE_GRACE_S):
                await admission.wait_idle()

    def serving_lost(self) -> str | None:
        """Why serving ended while the server still runs (a fault, not a shutdown), or
        None: ``python -m gateway`` then exits 1, so that its process manager restarts it."""
        return self._lost

    async def _agent_listener(
        self, port: int | None, host: str
    ) -> MultiListener[SocketStream] | None:
        """The agent-check port (``ASR_AGENT_PORT`` on ``host``), listening before the app
        says it is up; a port already taken fails the start in one line."""
        if port is None:
            return None
        try:
            listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        except OSError as exc:
            raise StartupError(
                f"ASR_AGENT_PORT={port} on {host}: cannot listen: {exc.strerror or exc}"
            ) from None
        logger.info("answering HAProxy's agent check on %s port %d", host, port)
        return listener

    def _capacity(self) -> Capacity:
        serving = self._serving
        if serving is None:
            return Capacity(ready=False, draining=True, active=0, places=1)
        admission = serving.admission
        return Capacity(
            ready=all(pool.ready for pool in serving.pools),
            draining=admission.announced.is_set(),
            active=admission.active,
            places=admission.max_sessions,
        )

    async def _drain_on_signal(self, signals: SignalDrain) -> None:
        await signals.received.wait()
        try:
            await self.drain()
        except Exception:
            # The signal still stops the server: a drain that cannot finish must not hold
            # it (uvicorn's shutdown closes the sessions left with 1012).
            logger.exception("the drain failed; shutting down now")
        signals.hand_over()

    # -- WebSocket --------------------------------------------------------------------

    async def _websocket(self, websocket: WebSocket) -> None:
        await serve_websocket(self._serving, websocket, self.metrics)

    # -- HTTP -------------------------------------------------------------------------

    async def _page(self, request: Request) -> Response:
        return self._page_files.response("index.html", request)

    async def _static(self, request: Request) -> Response:
        return self._page_files.response(request.path_params["name"], request)

    async def _healthz(self, request: Request) -> Response:
        serving = self._serving if self._stopped is None else None
        return await status.healthz(serving, self._stopped)

    async def _readyz(self, request: Request) -> Response:
        return await status.readyz(self._serving, request)

    async def _metrics(self, request: Request) -> Response:
        return await status.metrics(self._serving, request, self.metrics, self._gpu_memory)

    async def _transcribe(self, request: Request) -> Response:
        return await transcribe(self._serving, request, self.metrics)

    # -- the OpenAI dialect ------------------------------------------------------------

    async def _openai_transcribe(self, request: Request) -> Response:
        return await openai_transcriptions.create_transcription(
            self._serving, request, self.metrics
        )

    async def _openai_models(self, request: Request) -> Response:
        return await openai_transcriptions.list_models(self._serving, request)

    async def _openai_realtime(self, websocket: WebSocket) -> None:
        await serve_realtime(self._serving, websocket, self.metrics)

    async def _deepgram_listen(self, websocket: WebSocket) -> None:
        await serve_listen(self._serving, websocket, self.metrics)


def _first_error(exc: BaseException) -> str:
    """The first exception a task group's ``exc`` holds, in one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


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
    settings: GatewaySettings | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    wrap_signals: bool = True,
    server_host: str | None = None,
) -> Gateway:
    """The gateway app; with no ``settings`` they are read from ``environ`` (default: the
    process environment) when the app starts, so that a bad value fails start-up in one line."""
    return Gateway(settings, environ, wrap_signals=wrap_signals, server_host=server_host)


app = create_app()
