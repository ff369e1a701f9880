"""The operator's endpoints: ``/healthz`` (should the process be restarted?), ``/readyz``
(may it take sessions? not while draining, full, or with a pool not ready) and
``/metrics`` (Prometheus)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.limits.access import Refusal, check_status_access
from gateway.metrics import GatewayMetrics
from gateway.session.serving import Serving
from workers.pool import WorkerStatus


async def healthz(serving: Serving | None, not_serving: str | None = None) -> Response:
    """200 while the process serves or will again by itself (a worker restarting);
    503 once a pool cannot serve any more, so that a process manager restarts us, and
    whenever the app is not serving at all (``not_serving`` says why: not started yet, a
    fault ended serving, shutting down)."""
    if serving is None:
        why = not_serving or "not started"
        return JSONResponse({"status": "not serving", "reason": why}, 503)
    for name, pool in (
        ("streaming", serving.pool),
        ("offline", serving.offline_pool),
        ("vad", serving.vad_pool),
    ):
        reason = pool.health if pool is not None else None
        if reason is not None:
            return JSONResponse({"status": "failing", "pool": name, "reason": reason}, 503)
    return JSONResponse({"status": "ok"})


async def readyz(serving: Serving | None, request: Request) -> Response:
    if serving is None:
        return JSONResponse({"ready": False, "draining": False, "workers": []}, 503)
    admission = serving.admission
    draining = admission.announced.is_set()
    workers_ready = all(pool.ready for pool in serving.pools)
    # Full: a balancer should send the next session elsewhere (it would be refused here).
    ready = workers_ready and not draining and not admission.full
    status = 200 if ready else 503
    if _status_refusal(serving, request) is not None:
        # A load balancer's probe needs only the status code; the details need a key.
        return JSONResponse({"ready": ready, "draining": draining, "full": admission.full}, status)
    body = {
        "ready": ready,
        "draining": draining,
        "full": admission.full,
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


async def metrics(serving: Serving | None, request: Request, gauges: GatewayMetrics) -> Response:
    refusal = _status_refusal(serving, request) if serving is not None else None
    if refusal is not None:
        body = {"error": {"status": refusal.status, "message": refusal.message}}
        return JSONResponse(body, refusal.status, {"WWW-Authenticate": "Bearer"})
    return Response(gauges.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _status_refusal(serving: Serving, request: Request) -> Refusal | None:
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
