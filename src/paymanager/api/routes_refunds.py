"""`/intents/{id}/refunds` and `/refunds/{id}`: refunds of settled intents."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Security
from fastapi.responses import Response

from paymanager.api.auth import authenticate
from paymanager.api.idempotent import run_idempotent
from paymanager.api.schemas import RefundCreate, RefundList, RefundOut
from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.refunds.create import (
    RefundRequest,
    create_refund,
    get_refund,
    list_refunds,
    refund_view,
)
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn

router = APIRouter(tags=["refunds"])


@router.post(
    "/intents/{intent_id}/refunds", status_code=201, response_model=RefundOut,
    summary="Refund part or all of a settled intent",
    description="Creates a `pending` refund of at most the settled amount minus refunds not failed "
    "(422 `refund_exceeds_refundable` names what is left; 409 `intent_not_settled` before settlement). "
    "The outbox worker moves the money back through the ledger; the refund then becomes `succeeded` "
    "(or `failed` when the payee's balance no longer covers it) and `refund.<status>` is delivered to "
    "the service's webhooks. The fee: merchant-invoice refunds it pro rata, internal-p2p keeps it.",
)  # fmt: skip
async def create(
    intent_id: uuid.UUID,
    body: RefundCreate,
    request: Request,
    caller: ServiceIdentity = Security(authenticate),
) -> Response:
    payments: Payments = request.app.state.payments
    wanted = RefundRequest(body.amount, body.reason)

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        return 201, refund_view(await create_refund(payments, conn, caller, intent_id, wanted))

    return await run_idempotent(request, caller, work)


@router.get("/intents/{intent_id}/refunds", response_model=RefundList, summary="An intent's refunds")
async def list_(
    intent_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        rows = await list_refunds(conn, caller, intent_id)
    return {"object": "list", "data": [refund_view(row) for row in rows]}


@router.get("/refunds/{refund_id}", response_model=RefundOut, summary="One refund")
async def get(
    refund_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        return refund_view(await get_refund(conn, caller, refund_id))
