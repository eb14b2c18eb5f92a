"""`/webhook-endpoints` and `/webhook-deliveries`: a service's merchant webhooks and their log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request, Security
from fastapi.responses import Response

from paymanager.api.auth import authenticate
from paymanager.api.idempotent import REPLAYED_HEADER, run_idempotent
from paymanager.api.schemas import (
    WebhookDeliveryList,
    WebhookDeliveryOut,
    WebhookEndpointCreate,
    WebhookEndpointList,
    WebhookEndpointOut,
)
from paymanager.application.context import Payments
from paymanager.application.intents import events
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.application.webhooks import endpoints as webhooks
from paymanager.application.webhooks.address_guard import AddressGuard
from paymanager.application.webhooks.store import Endpoint
from paymanager.db.pool import Conn

router = APIRouter(tags=["webhooks"])

SHOWN_ONCE_DOC = (
    "The response carries the signing `secret` this once; a replay of the same request (same "
    "Idempotency-Key) answers without it. Deliveries are signed `Paymanager-Signature: t=<unix>,"
    'v1=<hex HMAC-SHA256 of "<t>.<body>">`; verify them with `paymanager.webhooks.verify`.'
)


def _guard(request: Request) -> AddressGuard:
    guard: AddressGuard = request.app.state.components.webhook_guard
    return guard


def _scope(caller: ServiceIdentity) -> str | None:
    """Admins see every service's deliveries; a service its own."""
    return None if caller.is_admin else caller.id


async def _with_secret(
    request: Request,
    caller: ServiceIdentity,
    status: int,
    make: Callable[[Conn], Awaitable[tuple[Endpoint, str]]],
) -> Response:
    """Run `make` under the Idempotency-Key; the stored outcome has no secret, the first answer has it."""
    shown: list[str] = []

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        endpoint, secret = await make(conn)
        shown.append(secret)
        return status, webhooks.endpoint_view(endpoint)

    response = await run_idempotent(request, caller, work)
    if not shown or response.headers.get(REPLAYED_HEADER) or response.status_code != status:
        return response
    body = orjson.loads(bytes(response.body))
    body["secret"] = shown[-1]
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


@router.post(
    "/webhook-endpoints", status_code=201, response_model=WebhookEndpointOut,
    summary="Register a webhook endpoint", description=SHOWN_ONCE_DOC,
)  # fmt: skip
async def create_endpoint(
    body: WebhookEndpointCreate, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments
    wanted = webhooks.NewEndpoint(body.url, body.event_types, body.description)

    async def make(conn: Conn) -> tuple[Endpoint, str]:
        return await webhooks.create_endpoint(
            conn, payments.box, _guard(request), caller.id, wanted, payments.clock()
        )

    return await _with_secret(request, caller, 201, make)


@router.get("/webhook-endpoints", response_model=WebhookEndpointList, summary="The caller's endpoints")
async def list_endpoints(
    request: Request, caller: ServiceIdentity = Security(authenticate)
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        rows = await webhooks.list_endpoints(conn, caller.id)
    return {"object": "list", "data": [webhooks.endpoint_view(row) for row in rows]}


@router.get("/webhook-endpoints/{endpoint_id}", response_model=WebhookEndpointOut, summary="One endpoint")
async def get_endpoint(
    endpoint_id: str, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        return webhooks.endpoint_view(await webhooks.get_endpoint(conn, caller.id, endpoint_id))


@router.delete("/webhook-endpoints/{endpoint_id}", status_code=204, summary="Remove an endpoint")
async def delete_endpoint(
    endpoint_id: str, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        await webhooks.delete_endpoint(conn, caller.id, endpoint_id, payments.clock())
    return Response(status_code=204)


@router.post(
    "/webhook-endpoints/{endpoint_id}/rotate-secret", response_model=WebhookEndpointOut,
    summary="A new signing secret; the previous one also signs for WEBHOOK_SECRET_GRACE_SEC",
    description=SHOWN_ONCE_DOC,
)  # fmt: skip
async def rotate_secret(
    endpoint_id: str, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments

    async def make(conn: Conn) -> tuple[Endpoint, str]:
        return await webhooks.rotate_secret(
            conn, payments.box, caller.id, endpoint_id, payments.clock(),
            payments.settings.webhook_secret_grace_sec,
        )  # fmt: skip

    return await _with_secret(request, caller, 200, make)


@router.post(
    "/webhook-endpoints/{endpoint_id}/enable", response_model=WebhookEndpointOut,
    summary="Re-enable a disabled endpoint",
)  # fmt: skip
async def enable_endpoint(
    endpoint_id: str, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        endpoint = await webhooks.enable_endpoint(
            conn, _guard(request), caller.id, endpoint_id, payments.clock()
        )
        return 200, webhooks.endpoint_view(endpoint)

    return await run_idempotent(request, caller, work)


@router.get(
    "/webhook-deliveries", response_model=WebhookDeliveryList,
    summary="The delivery log, newest first: status, attempts, last response, latency, next try",
)  # fmt: skip
async def list_deliveries(
    request: Request,
    caller: ServiceIdentity = Security(authenticate),
    endpoint_id: str | None = Query(default=None, max_length=40),
    status: str | None = Query(default=None, pattern="^(pending|retrying|succeeded|dead|cancelled)$"),
    starting_after: str | None = Query(
        default=None, max_length=40, description="next_cursor of the previous page."
    ),
    limit: int = Query(default=20, ge=1, le=webhooks.LIST_LIMIT_MAX),
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        before = None
        if starting_after is not None:
            cursor = await webhooks.get_delivery(conn, _scope(caller), starting_after)
            before = (cursor.created_at, cursor.id)
        rows = await webhooks.list_deliveries(
            conn, _scope(caller), endpoint_id=endpoint_id, status=status, before=before, limit=limit + 1
        )
    more = len(rows) > limit
    data = [webhooks.delivery_view(row) for row in rows[:limit]]
    return {"object": "list", "data": data, "next_cursor": data[-1]["id"] if more else None}


@router.get("/webhook-deliveries/{delivery_id}", response_model=WebhookDeliveryOut, summary="One delivery")
async def get_delivery(
    delivery_id: str, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        return webhooks.delivery_view(await webhooks.get_delivery(conn, _scope(caller), delivery_id))


@router.post(
    "/webhook-deliveries/{delivery_id}/replay", response_model=WebhookDeliveryOut,
    summary="Send a finished (dead, cancelled or succeeded) delivery again: same event id and body",
)  # fmt: skip
async def replay_delivery(
    delivery_id: str, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments

    async def work(conn: Conn, _: events.Pending) -> tuple[int, Any]:
        delivery = await webhooks.replay_delivery(conn, _scope(caller), delivery_id, payments.clock())
        return 200, webhooks.delivery_view(delivery)

    return await run_idempotent(request, caller, work)
