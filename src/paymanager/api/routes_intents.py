"""`/intents`: quote, create, confirm, cancel, read, list, and the live event stream."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import APIRouter, Body, Query, Request, Security
from fastapi.responses import Response
from sse_starlette.sse import EventSourceResponse

from paymanager.api.auth import authenticate
from paymanager.api.errors import domain_error_body, domain_status
from paymanager.api.idempotent import run_idempotent
from paymanager.api.schemas import CaptureRequest, IntentCreate, IntentList, IntentOut, QuoteOut, QuoteRequest
from paymanager.application.context import Payments
from paymanager.application.idempotency.unit_of_work import IntentReply
from paymanager.application.intents import events
from paymanager.application.intents.cancel import cancel_intent
from paymanager.application.intents.capture import CAPTURE_DEADLINE_PASSED, capture_intent
from paymanager.application.intents.confirm import confirm_intent
from paymanager.application.intents.create import IntentRequest, create_intent, quote, quote_view
from paymanager.application.intents.event_hub import IntentEventHub
from paymanager.application.intents.queries import LIST_LIMIT_MAX, get_intent, intent_view, list_intents
from paymanager.application.psp.payout import PAYOUT_CHANNELS
from paymanager.application.psp.store import PspStore
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.channels import ChannelName
from paymanager.domain.errors import CaptureExpiredError, IntentExpiredError
from paymanager.domain.intents import TERMINAL, IntentStatus

router = APIRouter(prefix="/intents", tags=["intents"])

# How long a quiet event stream waits before re-reading its intent (covers a LISTEN reconnect), and
# how often it checks whether the process is shutting down.
STREAM_RECHECK_S = 5.0
STREAM_WAKE_S = 0.5


@router.post("/quote", response_model=QuoteOut, summary="The fee and total of an amount on a channel")
async def quote_intent(
    body: QuoteRequest, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments

    async def work(_: Conn, __: events.Pending) -> tuple[int, Any]:
        return 200, quote_view(quote(payments, caller, body.channel.value, body.amount, body.currency))

    return await run_idempotent(request, caller, work)


@router.post("", status_code=201, response_model=IntentOut, summary="Create an intent (status created)")
async def create(
    body: IntentCreate, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments
    wanted = IntentRequest(
        body.channel.value, body.amount, body.currency, body.payer_account_id, body.payee_account_id,
        body.description, body.metadata, body.expires_in_sec, body.capture_method,
    )  # fmt: skip

    async def work(conn: Conn, pending: events.Pending) -> IntentReply:
        return IntentReply(201, await create_intent(payments, conn, caller, wanted, pending.published))

    return await run_idempotent(request, caller, work)


@router.post(
    "/{intent_id}/confirm",
    response_model=IntentOut,
    summary="Confirm: hold the funds and enqueue the settlement",
    description="Holds amount + fee with pending ledger transfers and enqueues the settlement in the same "
    "transaction; the outbox worker then settles it (status settled) and publishes `intent.{id}`. "
    "Payouts (**ipps-transfer**, **qp-transfer**, **wise-transfer**) stop at `confirmed` with "
    "`awaiting: psp`: their PSP transaction and its job (queue `psp.<name>`) commit with the hold, and "
    "the PSP's answer settles or fails them (`GET /intents/{id}` shows `psp`). A payout whose PSP is "
    "not in PSP_NAMES answers 422 `psp_not_configured` and holds nothing.",
)
async def confirm(
    intent_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments

    async def work(conn: Conn, pending: events.Pending) -> tuple[int, Any] | IntentReply:
        row = await confirm_intent(payments, conn, caller, intent_id, pending, hold_savepoint=False)
        if row.status is IntentStatus.EXPIRED:
            expired = IntentExpiredError(
                "the invoice expired before it was confirmed", {"intent": intent_view(row)}
            )
            return domain_status(expired), domain_error_body(expired)
        return IntentReply(200, row)

    return await run_idempotent(request, caller, work)


@router.post(
    "/{intent_id}/capture",
    response_model=IntentOut,
    summary="Capture a manual intent: post part or all of its hold, release the rest",
    description="For an intent created with `capture_method: manual` and confirmed (`requires_capture`): "
    "posts `amount` (omitted: the whole held amount) and the channel's fee on it, releases the rest of "
    "the hold, and settles the intent (status `settled`, `amount_captured`, the `intent.settled` "
    "webhook), in this request. 422 `capture_exceeds_capturable` (details.capturable) above the hold; "
    "409 `already_captured` the second time; 409 `intent_not_capturable` for an automatic, unconfirmed "
    "or ended intent; 409 `capture_expired` after the capture deadline (the hold is voided and the "
    "intent expired, if that had not happened yet).",
)
async def capture(
    intent_id: uuid.UUID,
    request: Request,
    body: CaptureRequest | None = Body(default=None),
    caller: ServiceIdentity = Security(authenticate),
) -> Response:
    payments: Payments = request.app.state.payments
    amount = body.amount if body is not None else None

    async def work(conn: Conn, pending: events.Pending) -> tuple[int, Any] | IntentReply:
        row = await capture_intent(payments, conn, caller, intent_id, amount, pending.published)
        if row.status is not IntentStatus.SETTLED:
            # The deadline passed (or the ledger had released the hold): the expiry commits, and the
            # capture is answered as refused.
            expired = CaptureExpiredError(
                row.failure_reason or CAPTURE_DEADLINE_PASSED, {"intent": intent_view(row)}
            )
            return domain_status(expired), domain_error_body(expired)
        return IntentReply(200, row)

    return await run_idempotent(request, caller, work)


@router.post(
    "/{intent_id}/cancel",
    response_model=IntentOut,
    summary="Cancel: a created intent ends; a confirmed one has its hold voided",
    description="A manual intent awaiting its capture has its hold voided; once captured (settled) "
    "a cancel answers 409 `invalid_transition`.",
)
async def cancel(
    intent_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> Response:
    payments: Payments = request.app.state.payments

    async def work(conn: Conn, pending: events.Pending) -> IntentReply:
        return IntentReply(200, await cancel_intent(payments, conn, caller, intent_id, pending.published))

    return await run_idempotent(request, caller, work)


@router.get("/{intent_id}", response_model=IntentOut, summary="One intent")
async def get(
    intent_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        intent = await get_intent(conn, caller, intent_id)
        tx = None
        if intent.channel in PAYOUT_CHANNELS:
            # The PSP's outcome and the intent's status commit together (end_payout): both read in
            # one snapshot, or a payout settling between two reads shows `confirmed` beside its
            # transfer's COMPLETED (seen by the whole-service chaos test).
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                intent = await get_intent(conn, caller, intent_id)
                tx = await PspStore(conn).by_intent(intent_id=intent.id)
        view = intent_view(intent)
    if tx is not None:
        view["psp"] = {"psp": tx.psp, "state": tx.state.value, "reference": tx.confirm_ref,
                       "attempts": tx.attempts, "last_error": tx.last_error}  # fmt: skip
    return view


@router.get("", response_model=IntentList, summary="Intents, newest first, with cursor pagination")
async def list_(
    request: Request,
    caller: ServiceIdentity = Security(authenticate),
    status: IntentStatus | None = None,
    channel: ChannelName | None = None,
    account_id: uuid.UUID | None = Query(
        default=None, description="Intents where this account pays or is paid."
    ),
    starting_after: uuid.UUID | None = Query(default=None, description="next_cursor of the previous page."),
    limit: int = Query(default=20, ge=1, le=LIST_LIMIT_MAX),
) -> dict[str, Any]:
    payments: Payments = request.app.state.payments
    async with payments.pool.acquire() as conn:
        rows, more = await list_intents(
            conn, caller, status=status.value if status else None, channel=channel.value if channel else None,
            account_id=account_id, starting_after=starting_after, limit=limit,
        )  # fmt: skip
    data = [intent_view(row) for row in rows]
    return {"object": "list", "data": data, "has_more": more, "next_cursor": data[-1]["id"] if more else None}


@router.get(
    "/{intent_id}/events",
    summary="Server-sent events: the intent's current state, then every status change",
    description="The first event is the current state; each later event is one status change "
    "(`event: intent.<status>`, `id: <version>`). The stream ends after a terminal status.",
    response_class=EventSourceResponse,
)
async def stream_events(
    intent_id: uuid.UUID, request: Request, caller: ServiceIdentity = Security(authenticate)
) -> EventSourceResponse:
    payments: Payments = request.app.state.payments
    hub: IntentEventHub = request.app.state.event_hub
    async with payments.pool.acquire() as conn:
        await get_intent(conn, caller, intent_id)
    queue = hub.subscribe(str(intent_id))
    return EventSourceResponse(_stream(request, payments, hub, caller, intent_id, queue))


async def _current(payments: Payments, caller: ServiceIdentity, intent_id: uuid.UUID) -> dict[str, Any]:
    async with payments.pool.acquire() as conn:
        return events.event_payload(await get_intent(conn, caller, intent_id))


def _sse(event: dict[str, Any]) -> dict[str, Any]:
    return {"event": event["type"], "id": str(event["version"]), "data": orjson.dumps(event).decode()}


async def _stream(
    request: Request,
    payments: Payments,
    hub: IntentEventHub,
    caller: ServiceIdentity,
    intent_id: uuid.UUID,
    queue: asyncio.Queue[dict[str, Any]],
) -> AsyncIterator[dict[str, Any]]:
    """Subscribed before the first read, so no change between the read and the stream is missed."""
    deadline = time.monotonic() + payments.settings.sse_max_duration_sec
    stopping: asyncio.Event = request.app.state.components.stopping
    try:
        event = await _current(payments, caller, intent_id)
        last = event["version"]
        yield _sse(event)
        recheck_at = time.monotonic() + STREAM_RECHECK_S
        while event["status"] not in TERMINAL and time.monotonic() < deadline:
            if stopping.is_set() or await request.is_disconnected():
                return
            try:
                event = await asyncio.wait_for(queue.get(), timeout=STREAM_WAKE_S)
            except TimeoutError:
                if time.monotonic() < recheck_at:
                    continue
                event = await _current(payments, caller, intent_id)
                recheck_at = time.monotonic() + STREAM_RECHECK_S
            if event["version"] > last:
                last = event["version"]
                yield _sse(event)
    finally:
        hub.unsubscribe(str(intent_id), queue)
