"""`POST /webhooks/psp/{name}`: a PSP's own webhook. It is authenticated by the PSP's signature, checked
by its driver on the raw body, not by our HMAC service signing; stored once per PSP event id and
answered at once, its effect is a job's."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from paymanager.adapters.psp.port import InvalidWebhookError
from paymanager.api.errors import ApiError
from paymanager.application.context import Payments
from paymanager.application.psp.webhooks import receive

router = APIRouter(tags=["psp"])


@router.post(
    "/webhooks/psp/{name}",
    summary="A PSP's webhook (signed by the PSP)",
    responses={
        200: {"description": "Stored (or a repeated event id: nothing done)."},
        400: {"description": "The signature or the body does not verify."},
        404: {"description": "No such PSP configured."},
    },
)
async def psp_webhook(name: str, request: Request) -> JSONResponse:
    components = request.app.state.components
    driver = components.psp_drivers.get(name)
    if driver is None:
        raise ApiError(404, "unknown_psp", f"no PSP named {name!r} is configured", {"psp": name})
    raw = await request.body()
    try:
        event = driver.verify_webhook(dict(request.headers), raw)
    except InvalidWebhookError as exc:
        raise ApiError(400, "invalid_webhook", str(exc), {"psp": name}) from None
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn, conn.transaction():
        stored = await receive(conn, name, event, raw)
    return JSONResponse({"received": True, "duplicate": not stored, "event_id": event.event_id})
