"""Runs a POST under its Idempotency-Key: the work, the stored outcome and the key commit together.

A POST is one transaction: the signature's replay memory and the key's claim (one statement), the
work, the stored outcome, the commit. The work runs first without a savepoint (two round trips fewer
per request); when it refuses the request, that transaction rolls back whole and the POST runs again
with the work in a savepoint, so the refusal is stored under the key with nothing of its effects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import orjson
from fastapi import Request
from fastapi.responses import Response

from paymanager.api.auth import UsedSignature, post_signature, remember, replayed_error
from paymanager.api.errors import domain_error_body, domain_status, error_body
from paymanager.application.context import Payments
from paymanager.application.idempotency import keys as idempotency
from paymanager.application.intents import events
from paymanager.application.intents.settle import publish
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.errors import DomainError
from paymanager.ledger import LedgerConflictError
from paymanager.logging import get_logger

log = get_logger("paymanager.api")

REPLAYED_HEADER = "Idempotent-Replayed"
# The work of one POST: given the transaction's connection and the events it announces (NOTIFYed by
# the transaction's last statement, published to Redis after the commit), it returns the status code
# and the JSON body of the response.
Work = Callable[[Conn, events.Pending], Awaitable[tuple[int, Any]]]
# How the work refuses a request: its own errors, or the schema catching input the code let through.
SCHEMA_REFUSALS = (asyncpg.CheckViolationError, asyncpg.StringDataRightTruncationError)
REFUSALS = (DomainError, *SCHEMA_REFUSALS)


# Runs of one POST again after a transient ledger conflict, before the conflict is raised.
LEDGER_CONFLICT_RETRIES_MAX = 4


class _Refused(Exception):
    """The work refused the request outside a savepoint: its transaction must roll back."""


async def run_idempotent(request: Request, caller: ServiceIdentity, work: Work) -> Response:
    payments: Payments = request.app.state.payments
    used = post_signature(request)
    try:
        key = idempotency.check_key(request.headers.get("Idempotency-Key"))
    except DomainError:
        # The signature does not cover the key: spend it anyway, or the same signed request could be
        # sent again with a key added and run.
        async with payments.pool.acquire() as conn:
            await remember(conn, used)
        raise
    body = await request.body()
    path = request.url.path
    wanted = idempotency.KeyClaim(
        caller.id, key, request.method, path, idempotency.request_hash(request.method, path, body),
        payments.clock(), payments.settings.idempotency_key_ttl_sec,
    )  # fmt: skip
    guarded = False
    conflicts = 0
    while True:
        # Nothing of a failed attempt committed, the signature's memory included, so the next one
        # remembers it as the first time.
        try:
            return await _transaction(payments, wanted, used, work, guarded=guarded)
        except _Refused:
            guarded = True  # a guarded attempt answers a refusal itself, so this happens once
        except LedgerConflictError:
            # A ledger batch that ran without a savepoint met a transient conflict (a nanosecond
            # timestamp taken by another process, a deadlock): the ledger's own retry, done whole.
            conflicts += 1
            if conflicts > LEDGER_CONFLICT_RETRIES_MAX:
                raise


async def _transaction(
    payments: Payments, wanted: idempotency.KeyClaim, used: UsedSignature, work: Work, *, guarded: bool
) -> Response:
    pending = events.Pending()
    async with payments.pool.acquire() as conn, conn.transaction():
        fresh, stored = await idempotency.claim_signed(conn, wanted, used.signature, used.expires_at)
        if not fresh:
            raise replayed_error()
        if stored is not None:
            return _json(stored.body, stored.status_code, {REPLAYED_HEADER: "true"})
        if guarded:
            status, payload = await _attempt(conn, work, pending)
        else:
            try:
                status, payload = await work(conn, pending)
            except REFUSALS as exc:
                raise _Refused from exc
        await idempotency.store(
            conn, wanted.service_id, wanted.key, idempotency.StoredOutcome(status, payload),
            events.NOTIFY_CHANNEL, [events.notify_text(event) for event in pending.notified],
        )  # fmt: skip
    for event in pending.published:
        await publish(payments, event)
    return _json(payload, status)


def _json(payload: Any, status: int, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, headers=headers, media_type="application/json")


async def _attempt(conn: Conn, work: Work, pending: events.Pending) -> tuple[int, Any]:
    """Run the work in a savepoint: a refused request leaves no effect but its stored answer."""
    try:
        async with conn.transaction():
            return await work(conn, pending)
    except DomainError as exc:
        pending.clear()
        return domain_status(exc), domain_error_body(exc)
    except SCHEMA_REFUSALS as exc:
        # The schema caught input the code should have refused first: still the client's input, so
        # a 422, but logged as the bug it is.
        pending.clear()
        log.error("the schema refused input the code accepted", error=str(exc))
        return 422, error_body("constraint_violation", "the request breaks a rule of the data model", {})
