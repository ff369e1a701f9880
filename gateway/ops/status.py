"""The operator's endpoints: ``/healthz`` (should the process be restarted?), ``/readyz``
(may it take sessions? not while draining, full, or with a pool not ready) and
``/metrics`` (Prometheus)."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.limits.access import Refusal, check_status_access
from gateway.metrics import GatewayMetrics
from gateway.ops.gpu_memory import GpuMemory
from gateway.session.serving import ServedModel, Serving
from shared.engines import Role
from workers.pool import WorkerStatus


async def healthz(serving: Serving | None, not_serving: str | None = None) -> Response:
    """200 while the process serves or will again by itself (a worker restarting);
    503 once a pool cannot serve any more, so that a process manager restarts us, and
    whenever the app is not serving at all (``not_serving`` says why: not started yet, a
    fault ended serving, shutting down)."""
    if serving is None:
        why = not_serving or "not started"
        return JSONResponse({"status": "not serving", "reason": why}, 503)
    for model in serving.models.values():
        for role, pool in ((Role.STREAMING, model.pool), *model.companions.items()):
            reason = pool.health
            if reason is not None:
                body = {"status": "failing", "model": model.name, "pool": role, "reason": reason}
                return JSONResponse(body, 503)
    return JSONResponse({"status": "ok"})


async def readyz(serving: Serving | None, request: Request) -> Response:
    """Whether a session may come here: every model ready, or with ``?model=NAME`` that
    model ready and not full (404 for a name not served; without the key, where
    ASR_PROTECT_STATUS asks for one, a 503 as for a served model that is not ready), so
    that a balancer can route by model. Not while draining, nor while the gateway-wide
    places are all taken."""
    if serving is None:
        return JSONResponse({"ready": False, "draining": False, "workers": []}, 503)
    admission = serving.admission
    draining = admission.announced.is_set()
    asked = request.query_params.get("model")
    if asked is not None and asked not in serving.models:
        if _status_refusal(serving, request) is not None:
            # Without the key, as a served model that cannot take a session: the answer
            # does not tell which names are served (GET /v1/models does, with the key).
            return JSONResponse({"ready": False, "draining": draining, "full": False}, 503)
        return JSONResponse({"ready": False, "error": f"model {asked[:64]!r} is not served"}, 404)
    chosen = list(serving.models.values()) if asked is None else [serving.models[asked]]
    # Full: a balancer should send the next session elsewhere (it would be refused here).
    # One model full refuses only that model's sessions: only ?model= says so.
    full = admission.full or (asked is not None and serving.models[asked].places.full)
    ready = all(model.ready for model in chosen) and not draining and not full
    status = 200 if ready else 503
    if _status_refusal(serving, request) is not None:
        # A load balancer's probe needs only the status code; the details need a key.
        return JSONResponse({"ready": ready, "draining": draining, "full": full}, status)
    body: dict[str, object] = {
        "ready": ready,
        "draining": draining,
        "full": full,
        "sessions": {"active": admission.active, "max": admission.max_sessions},
        # The default model's workers, as the body gave them before there were models.
        **_workers_json(serving.default),
    }
    default = serving.default.name
    body["models"] = {model.name: _model_json(model, model.name == default) for model in chosen}
    return JSONResponse(body, status)


def _model_json(model: ServedModel, default: bool) -> dict[str, object]:
    places = model.places
    body: dict[str, object] = {
        "ready": model.ready and not places.full,
        "default": default,
        "sessions": {"active": places.active, "max": places.max_sessions},
        **_workers_json(model),
    }
    return body


def _workers_json(model: ServedModel) -> dict[str, object]:
    """``workers``, and ``offline_workers``, ``vad_workers`` and ``speaker_workers`` where it
    has them."""
    body: dict[str, object] = {"workers": [_worker_json(w) for w in model.pool.status()]}
    for role, companion in model.companions.items():
        body[f"{role}_workers"] = [_worker_json(w) for w in companion.status()]
    return body


async def metrics(
    serving: Serving | None, request: Request, gauges: GatewayMetrics, gpus: GpuMemory
) -> Response:
    refusal = _status_refusal(serving, request) if serving is not None else None
    if refusal is not None:
        body = {"error": {"status": refusal.status, "message": refusal.message}}
        return JSONResponse(body, refusal.status, {"WWW-Authenticate": "Bearer"})
    if gauges.has_cuda_workers:
        gauges.gpu_memory_by_pid = dict(await gpus.refresh())
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
        "provider": worker.provider,
        "engine": worker.engine,
        "model": worker.model,
        "state": worker.state,
        "pid": worker.pid,
        "active_streams": worker.active_streams,
        "free_slots": worker.free_slots,
        "engine_streams": worker.engine_streams,
        "restarts": worker.restarts,
        "gpu_memory_bytes": worker.gpu_memory_bytes,
        "nice": worker.nice,
        "urgent": worker.urgent,
    }
