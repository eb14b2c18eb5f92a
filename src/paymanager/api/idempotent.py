"""Runs a POST under its Idempotency-Key: the work, the stored outcome and the key commit together."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import orjson
from fastapi import Request
from fastapi.responses import Response

from paymanager.api.auth import remember_post_signature
from paymanager.api.errors import domain_error_body, domain_status, error_body
from paymanager.application import idempotency
from paymanager.application.context import Payments
from paymanager.application.services import ServiceIdentity
from paymanager.application.settle_intent import publish
from paymanager.db.pool import Conn
from paymanager.domain.errors import DomainError
from paymanager.logging import get_logger

log = get_logger("paymanager.api")

REPLAYED_HEADER = "Idempotent-Replayed"
# The work of one POST: given the transaction's connection and a list to append events to (published
# to Redis after the commit), it returns the status code and the JSON body of the response.
Work = Callable[[Conn, list[dict[str, Any]]], Awaitable[tuple[int, Any]]]


async def run_idempotent(request: Request, caller: ServiceIdentity, work: Work) -> Response:
    payments: Payments = request.app.state.payments
    key = idempotency.check_key(request.headers.get("Idempotency-Key"))
    body = await request.body()
    path = request.url.path
    digest = idempotency.request_hash(request.method, path, body)
    events: list[dict[str, Any]] = []
    async with payments.pool.acquire() as conn, conn.transaction():
        await remember_post_signature(request, conn)
        stored = await idempotency.claim(
            conn, caller.id, key, request.method, path, digest, payments.clock(),
            payments.settings.idempotency_key_ttl_sec,
        )  # fmt: skip
        if stored is not None:
            return _json(stored.body, stored.status_code, {REPLAYED_HEADER: "true"})
        status, payload = await _attempt(conn, work, events)
        await idempotency.store(conn, caller.id, key, idempotency.StoredOutcome(status, payload))
    for event in events:
        await publish(payments, event)
    return _json(payload, status)


def _json(payload: Any, status: int, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, headers=headers, media_type="application/json")


async def _attempt(conn: Conn, work: Work, events: list[dict[str, Any]]) -> tuple[int, Any]:
    """Run the work in a savepoint: a refused request leaves no effect but its stored answer."""
    try:
        async with conn.transaction():
            return await work(conn, events)
    except DomainError as exc:
        events.clear()
        return domain_status(exc), domain_error_body(exc)
    except (asyncpg.CheckViolationError, asyncpg.StringDataRightTruncationError) as exc:
        # The schema caught input the code should have refused first: still the client's input, so
        # a 422, but logged as the bug it is.
        events.clear()
        log.error("the schema refused input the code accepted", error=str(exc))
        return 422, error_body("constraint_violation", "the request breaks a rule of the data model", {})
