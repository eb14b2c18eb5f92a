"""`/accounts`: open an account, read its balance and history."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Query, Request, Security
from fastapi.responses import Response

from paymanager.api.auth import authenticate
from paymanager.api.idempotent import run_idempotent
from paymanager.api.schemas import AccountCreate, AccountOut, BalanceOut, HistoryList
from paymanager.application.accounts import use_cases as accounts
from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.intents.queries import LIST_LIMIT_MAX, intent_view
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.channels import AccountKind

router = APIRouter(prefix="/accounts", tags=["accounts"])


@router.post("", status_code=201, response_model=AccountOut, summary="Open a user or merchant account")
async def create_account(
    body: AccountCreate, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments
    wanted = accounts.OpenAccount(AccountKind(body.kind), body.currency, body.reference)

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        row = await accounts.open_account(payments, conn, caller, wanted)
        return 201, accounts.account_view(row)

    return await run_idempotent(request, caller, work)


@router.get("/{account_id}", response_model=AccountOut, summary="One account")
async def get_account(
    account_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        return accounts.account_view(await accounts.get_account(conn, caller, account_id))


@router.get(
    "/{account_id}/balance", response_model=BalanceOut, summary="Posted, pending and available balance"
)
async def get_balance(
    account_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> dict[str, Any]:
    return await accounts.balance(request.app.state.payments, caller, account_id)


@router.get(
    "/{account_id}/history", response_model=HistoryList, summary="Intents that moved the account's money"
)
async def get_history(
    account_id: uuid.UUID,
    request: Request,
    caller: ServiceIdentity = Security(authenticate),
    limit: int = Query(default=20, ge=1, le=LIST_LIMIT_MAX),
    starting_after: uuid.UUID | None = Query(default=None, description="The last id of the previous page."),
) -> dict[str, Any]:
    rows, more = await accounts.history(request.app.state.payments, caller, account_id, starting_after, limit)
    data = [intent_view(row) for row in rows]
    return {"object": "list", "data": data, "has_more": more, "next_cursor": data[-1]["id"] if more else None}
