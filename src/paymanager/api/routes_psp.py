"""`/admin/psp` (manual review of PSP transactions) and `/admin/balances` (the balance monitor's
latest checks), admin scope."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query, Request, Security
from fastapi.responses import Response
from pydantic import BaseModel, Field

from paymanager.api.auth import require_admin
from paymanager.api.idempotent import run_idempotent
from paymanager.application.admin import ops
from paymanager.application.admin.use_cases import Actor
from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.psp import review
from paymanager.application.psp.store import PspStore
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn

router = APIRouter(tags=["psp"])


class Resolution(BaseModel):
    """Exactly one of `completed` (the PSP's reference: the payout happened) or `failed` (why not)."""

    completed: str | None = Field(default=None, min_length=1, max_length=review.TEXT_CHARS_MAX)
    failed: str | None = Field(default=None, min_length=1, max_length=review.TEXT_CHARS_MAX)


@router.get("/admin/psp", summary="PSP transactions, newest first (filter by state and PSP)")
async def list_psp(
    request: Request,
    state: str | None = Query(default=None, pattern=r"^[A-Z_]{1,32}$"),
    psp: str | None = Query(default=None, pattern=r"^[a-z][a-z0-9_]{0,31}$"),
    limit: int = Query(default=100, ge=1, le=review.LIST_LIMIT_MAX),
    _: ServiceIdentity = Security(require_admin),
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        rows = await review.list_txs(conn, state=state, psp=psp, limit=limit)
    return {"object": "list", "data": [row.view() for row in rows]}


@router.get("/admin/psp/{tx_id}", summary="One PSP transaction")
async def show_psp(
    tx_id: uuid.UUID, request: Request, _: ServiceIdentity = Security(require_admin)
) -> dict[str, object]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        return (await review.get_tx(conn, tx_id)).view()


@router.post("/admin/psp/{tx_id}/resolve", summary="Resolve a PSP transaction in MANUAL_REVIEW (audited)")
async def resolve_psp(
    tx_id: uuid.UUID, body: Resolution, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    payments: Payments = request.app.state.payments

    async def work(conn: Conn, pending: events.Pending) -> tuple[int, Any]:
        resolved = await ops.resolve_psp(
            payments, conn, Actor(caller.id, "api"), tx_id, completed_ref=body.completed,
            failed_reason=body.failed, pending=pending.published,
        )  # fmt: skip
        return 200, resolved.view()

    return await run_idempotent(request, caller, work)


@router.get("/admin/balances", summary="The balance monitor's latest check per PSP and currency")
async def balances(request: Request, _: ServiceIdentity = Security(require_admin)) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        checks = await PspStore(conn).balance_checks()
    return {
        "object": "list",
        "data": [
            {"psp": c.psp, "currency": c.currency, "state": c.state, "ledger_balance": c.ledger_balance,
             "partner_balance": c.partner_balance, "error": c.error, "checked_at": c.checked_at.isoformat(),
             "changed_at": c.changed_at.isoformat()}
            for c in checks
        ],
    }  # fmt: skip
