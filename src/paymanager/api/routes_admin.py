"""`/admin/*`: queues, jobs, intents, services, the audit and the ledger's verification (admin scope).

Every route needs a signed request from a service with the admin scope (401 unsigned, 403 without
the scope, in the one error shape). Every POST is a signed, idempotent POST like the others
(`Idempotency-Key`), runs the use case of `application/admin` (the dashboard's and the CLI's too) and
writes its audit row in the same transaction.

Other components add their own admin routes (PSP manual review, balances, webhook deliveries) with
`ADMIN_ROUTERS.append(router)` before `create_app`: each router is mounted under `/admin` with the
admin scope and the error responses.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Path, Query, Request, Security
from fastapi.responses import Response
from pydantic import BaseModel, Field

from paymanager.api.auth import require_admin
from paymanager.api.errors import ApiError, error_body
from paymanager.api.idempotent import run_idempotent
from paymanager.application.admin import use_cases as admin
from paymanager.application.admin.store import IntentFilter
from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.jobs import JobState
from paymanager.jobs.admin import JOB_ID_MAX, MAX_DEPTH_MAX, REPLAY_LIMIT_MAX

router = APIRouter(tags=["admin"])

# Routers other components contribute; mounted under /admin with the admin scope by `admin_routers`.
ADMIN_ROUTERS: list[APIRouter] = []


def admin_routers() -> list[APIRouter]:
    return [router, *ADMIN_ROUTERS]


def _actor(caller: ServiceIdentity) -> admin.Actor:
    return admin.Actor(caller.id, "api")


def _payments(request: Request) -> Payments:
    payments: Payments = request.app.state.payments
    return payments


def refused(exc: ValueError) -> ApiError:
    """A ValueError of an admin use case as the API answers it."""
    if isinstance(exc, admin.UnknownQueueError):
        return ApiError(
            404, "queue_not_found", str(exc), {"queue": exc.queue, "did_you_mean": exc.suggestion}
        )
    if isinstance(exc, admin.ReplayNeedsFilterError):
        return ApiError(422, "filter_required", str(exc))
    return ApiError(422, "invalid_request", str(exc))


def _refused_reply(exc: ApiError) -> tuple[int, Any]:
    """A refusal as the work's answer, so the unit of work stores it with the signature and the key
    (a replayed request is refused as `replayed`, a retried key gets the same answer)."""
    return exc.status, error_body(exc.code, exc.message, exc.details)


def _queue_view(view: admin.QueueView) -> dict[str, Any]:
    return {
        "name": view.name, "paused": view.paused, "max_depth": view.max_depth, "rate_limit": view.rate_limit,
        "concurrency_max": view.concurrency_max, "waiting_events": view.waiting_events, "depth": view.depth,
        "counts": view.counts, "oldest_available_s": view.oldest_available_s,
    }  # fmt: skip


# --- queues ----------------------------------------------------------------------------------------


@router.get("/queues", summary="Every queue: jobs by state, depth, oldest due job's age, settings")
async def list_queues(request: Request, _: ServiceIdentity = Security(require_admin)) -> dict[str, Any]:
    async with _payments(request).pool.acquire() as conn:
        return {"data": [_queue_view(v) for v in await admin.queues(conn)]}


async def _queue_action(request: Request, caller: ServiceIdentity, action: Any) -> Response:
    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        try:
            view = await action(conn, _actor(caller))
        except ValueError as exc:
            return _refused_reply(refused(exc))
        return 200, _queue_view(view)

    return await run_idempotent(request, caller, work)


@router.post("/queues/{name}/pause", summary="Stop claiming a queue's jobs (running jobs finish)")
async def pause_queue(
    name: str, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    return await _queue_action(request, caller, lambda conn, actor: admin.pause_queue(conn, actor, name))


@router.post("/queues/{name}/resume", summary="Claim a paused queue's jobs again")
async def resume_queue(
    name: str, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    return await _queue_action(request, caller, lambda conn, actor: admin.resume_queue(conn, actor, name))


class MaxDepthIn(BaseModel):
    max_depth: int | None = Field(ge=1, le=MAX_DEPTH_MAX, description="null removes the limit")


@router.post("/queues/{name}/max-depth", summary="Refuse enqueues once a queue holds this many jobs")
async def set_max_depth(
    name: str, body: MaxDepthIn, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    return await _queue_action(
        request, caller, lambda conn, actor: admin.set_max_depth(conn, actor, name, body.max_depth)
    )


# --- jobs ------------------------------------------------------------------------------------------


@router.get("/jobs", summary="Jobs newest first, by state, queue, kind or intent")
async def list_jobs(
    request: Request,
    state: JobState | None = None,
    queue: str | None = Query(None, max_length=100),
    kind: str | None = Query(None, max_length=200),
    intent_id: uuid.UUID | None = None,
    before_id: int | None = Query(None, ge=1, le=JOB_ID_MAX),
    limit: int = Query(50, ge=1, le=admin.JOB_LIST_LIMIT_MAX),
    _: ServiceIdentity = Security(require_admin),
) -> dict[str, Any]:
    where = admin.JobFilter(state=state, queue=queue, kind=kind, intent_id=intent_id, before_id=before_id)
    async with _payments(request).pool.acquire() as conn:
        try:
            rows = await admin.list_jobs(conn, where, limit=limit)
        except ValueError as exc:
            raise refused(exc) from None
    return {"data": rows}


@router.get("/jobs/{job_id}", summary="One job, its error history included")
async def get_job(
    request: Request, job_id: int = Path(ge=1, le=JOB_ID_MAX), _: ServiceIdentity = Security(require_admin)
) -> dict[str, Any]:
    async with _payments(request).pool.acquire() as conn:
        row = await admin.get_job(conn, job_id)
    if row is None:
        raise ApiError(404, "job_not_found", f"no job {job_id}")
    return row


@router.post("/jobs/{job_id}/retry", summary="Run a dead, cancelled, retryable or scheduled job now")
async def retry_job(
    request: Request,
    job_id: int = Path(ge=1, le=JOB_ID_MAX),
    caller: ServiceIdentity = Security(require_admin),
) -> Response:
    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        if not await admin.retry_job(conn, _actor(caller), job_id):
            message = f"job {job_id} does not exist or is not dead, cancelled, retryable or scheduled"
            return _refused_reply(ApiError(409, "job_not_retryable", message))
        return 200, {"id": job_id, "state": "available"}

    return await run_idempotent(request, caller, work)


@router.post("/jobs/{job_id}/cancel", summary="Cancel a job; a running one is asked to stop")
async def cancel_job(
    request: Request,
    job_id: int = Path(ge=1, le=JOB_ID_MAX),
    caller: ServiceIdentity = Security(require_admin),
) -> Response:
    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        result = await admin.cancel_job(conn, _actor(caller), job_id)
        if result is None:
            return _refused_reply(
                ApiError(409, "job_finished", f"job {job_id} is finished or does not exist")
            )
        return 200, {"id": job_id, "outcome": result.outcome}

    return await run_idempotent(request, caller, work)


class ReplayIn(BaseModel):
    kind: str | None = Field(None, max_length=200)
    queue: str | None = Field(None, max_length=100)
    error_contains: str | None = Field(None, max_length=500)
    since: datetime | None = None
    until: datetime | None = None
    all: bool = Field(False, description="Replay every dead job when no filter is given.")
    limit: int = Field(1_000, ge=1, le=REPLAY_LIMIT_MAX)


@router.post("/jobs/replay", summary="Replay the dead jobs matching every filter (none: only with all=true)")
async def replay_jobs(
    body: ReplayIn, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    where = admin.ReplayFilter(body.kind, body.queue, body.error_contains, body.since, body.until)

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        try:
            ids = await admin.replay_dead(conn, _actor(caller), where, replay_all=body.all, limit=body.limit)
        except ValueError as exc:
            return _refused_reply(refused(exc))
        return 200, {"replayed": ids, "count": len(ids)}

    return await run_idempotent(request, caller, work)


# --- intents, services, the audit, the ledger ----------------------------------------------------


@router.get("/intents", summary="Search intents by id, service, status, channel, account, creation time")
async def search_intents(
    request: Request,
    intent_id: uuid.UUID | None = None,
    service_id: str | None = Query(None, max_length=100),
    status: str | None = Query(None, max_length=20),
    channel: str | None = Query(None, max_length=40),
    account_id: uuid.UUID | None = None,
    created_since: datetime | None = None,
    created_until: datetime | None = None,
    limit: int = Query(50, ge=1, le=admin.INTENT_LIMIT_MAX),
    _: ServiceIdentity = Security(require_admin),
) -> dict[str, Any]:
    where = IntentFilter(intent_id, service_id, status, channel, account_id, created_since, created_until)
    async with _payments(request).pool.acquire() as conn:
        found = await admin.search_intents(conn, where, limit=limit)
    return {"data": [_intent(i) for i in found]}


def _intent(found: Any) -> dict[str, Any]:
    return asdict(found)


class ServiceIn(BaseModel):
    name: str = Field(min_length=1, max_length=100)
    admin: bool = False


@router.post("/services", status_code=201, summary="Register a service; its secret is in this answer only")
async def create_service(
    body: ServiceIn, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    box = _payments(request).box

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        identity, secret = await admin.create_service(
            conn, box, _actor(caller), body.name, admin_scope=body.admin
        )
        return 201, {
            "id": identity.id,
            "name": identity.name,
            "scopes": sorted(identity.scopes),
            "secret": secret,
        }

    return await run_idempotent(request, caller, work)


@router.post("/services/{service_id}/disable", summary="Refuse a service's requests from now on")
async def disable_service(
    service_id: str, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        if not await admin.disable_service(conn, _actor(caller), service_id):
            return _refused_reply(ApiError(404, "service_not_found", f"no service {service_id}"))
        return 200, {"id": service_id, "disabled": True}

    return await run_idempotent(request, caller, work)


@router.post(
    "/services/{service_id}/rotate-secret", summary="A new secret for a service (in this answer only)"
)
async def rotate_secret(
    service_id: str, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    box = _payments(request).box

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        secret = await admin.rotate_secret(conn, box, _actor(caller), service_id)
        if secret is None:
            return _refused_reply(ApiError(404, "service_not_found", f"no service {service_id}"))
        return 200, {"id": service_id, "secret": secret}

    return await run_idempotent(request, caller, work)


@router.get("/audit", summary="Admin actions newest first (who, what, when, before and after)")
async def audit(
    request: Request,
    target: str | None = Query(None, max_length=500),
    action: str | None = Query(None, max_length=100),
    before_id: int | None = Query(None, ge=1, le=JOB_ID_MAX),
    limit: int = Query(100, ge=1, le=admin.AUDIT_LIMIT_MAX),
    _: ServiceIdentity = Security(require_admin),
) -> dict[str, Any]:
    async with _payments(request).pool.acquire() as conn:
        entries = await admin.audit_log(conn, target=target, action=action, before_id=before_id, limit=limit)
    return {"data": [_intent(e) for e in entries]}
