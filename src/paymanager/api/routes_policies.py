"""`/policies`: limits per channel and service (admin scope)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Security
from fastapi.responses import Response

from paymanager.api.auth import require_admin
from paymanager.api.idempotent import run_idempotent
from paymanager.api.schemas import PolicyList, PolicyOut, PolicyPut
from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.policies import use_cases as policies
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn

router = APIRouter(prefix="/policies", tags=["policies"])


@router.post("", response_model=PolicyOut, summary="Create or replace the policy of a channel (and service)")
async def put_policy(
    body: PolicyPut, request: Request, caller: ServiceIdentity = Security(require_admin)
) -> Response:
    payments: Payments = request.app.state.payments
    given = policies.PolicyInput(
        body.channel.value, body.service_id, body.min_amount, body.max_amount, body.daily_volume_per_account,
        body.currencies,
    )  # fmt: skip

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        row = await policies.put_policy(conn, payments.channels, given, payments.clock())
        return 200, policies.policy_view(row)

    return await run_idempotent(request, caller, work)


@router.get("", response_model=PolicyList, summary="Every policy")
async def list_policies(request: Request, _: ServiceIdentity = Security(require_admin)) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        rows = await policies.list_policies(conn)
    return {"object": "list", "data": [policies.policy_view(row) for row in rows]}


@router.get("/{policy_id}", response_model=PolicyOut, summary="One policy")
async def get_policy(
    policy_id: uuid.UUID, request: Request, _: ServiceIdentity = Security(require_admin)
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        return policies.policy_view(await policies.get_policy(conn, policy_id))


@router.delete("/{policy_id}", status_code=204, summary="Remove a policy")
async def delete_policy(
    policy_id: uuid.UUID, request: Request, _: ServiceIdentity = Security(require_admin)
) -> Response:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        await policies.delete_policy(conn, policy_id)
    return Response(status_code=204)
