"""`/checkout-sessions`: create, read, confirm, cancel split-tender checkout sessions."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Security
from fastapi.responses import Response

from paymanager.api.auth import authenticate
from paymanager.api.errors import domain_error_body, domain_status
from paymanager.api.idempotent import run_idempotent
from paymanager.api.schemas_sessions import SessionCreate, SessionOut
from paymanager.application.intents import events
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.application.sessions.context import Sessions
from paymanager.application.sessions.use_cases import (
    SessionRequest,
    cancel_session,
    confirm_session,
    create_session,
    get_session,
)
from paymanager.application.sessions.views import session_view
from paymanager.db.pool import Conn
from paymanager.domain.sessions import LegKind, LegRequest, SessionExpiredError, SessionStatus

router = APIRouter(prefix="/checkout-sessions", tags=["checkout sessions"])


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


@router.post("", status_code=201, response_model=SessionOut, summary="Create a checkout session (open)")
async def create(
    body: SessionCreate, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    sessions = _sessions(request)
    wanted = SessionRequest(
        body.merchant_account_id, body.amount, body.currency,
        [LegRequest(LegKind(leg.kind), leg.amount, leg.card) for leg in body.legs],
        expires_at=body.expires_at, ttl_sec=body.ttl_sec, metadata=body.metadata,
    )  # fmt: skip

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        return 201, session_view(*await create_session(sessions, conn, caller, wanted))

    return await run_idempotent(request, caller, work)


@router.get("/{session_id}", response_model=SessionOut, summary="One checkout session and its legs")
async def get(
    session_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Any:
    async with _sessions(request).payments.pool.acquire() as conn:
        return session_view(*await get_session(conn, caller, session_id))


@router.post(
    "/{session_id}/confirm",
    response_model=SessionOut,
    summary="Confirm: debit the gift cards and authorise the card (as outbox jobs)",
    description="The session goes `processing` and its actions run in the background: DEBIT_GIFT for each "
    "gift card and AUTHORIZE_PSP for the card, in parallel; it ends `completed` (then CAPTURE_PSP), or "
    "`failed` with every leg that moved money compensated. "
    "A session past its expiry answers 409 `session_expired` (and is expired).",
)
async def confirm(
    session_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    sessions = _sessions(request)

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        session, legs = await confirm_session(sessions, conn, caller, session_id)
        if session.status is SessionStatus.EXPIRED:
            expired = SessionExpiredError(
                "the checkout session expired", {"session": session_view(session, legs)}
            )
            return domain_status(expired), domain_error_body(expired)
        return 200, session_view(session, legs)

    return await run_idempotent(request, caller, work)


@router.post(
    "/{session_id}/cancel",
    response_model=SessionOut,
    summary="Cancel: an open or processing session ends; captured legs are compensated",
)
async def cancel(
    session_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    sessions = _sessions(request)

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        return 200, session_view(*await cancel_session(sessions, conn, caller, session_id))

    return await run_idempotent(request, caller, work)
