"""End an intent's saga: post its holds (settled) or void them (failed, cancelled), exactly once.

`finish` runs on the caller's transaction under the intent's row lock: the settlement job (inside
its lease-fenced completion), a cancel, and the reconciler all go through it, so whichever comes
first ends the intent and the others find it finished. The `settlement` row's primary key is the
schema's guarantee of once.
"""

from __future__ import annotations

import uuid
from typing import Any

from paymanager.application import events, ledger_ops
from paymanager.application.context import Payments
from paymanager.db.pool import Conn
from paymanager.db.sql import load_queries
from paymanager.domain.intents import IntentStatus, SettlementOutcome, transition
from paymanager.jobs import JobContext, PermanentError
from paymanager.logging import get_logger

Q = load_queries("paymanager.application", "intents.sql")
log = get_logger("paymanager.settlement")

DEADLINE_PASSED = "settlement deadline passed"
EXPIRED = "the invoice expired before it was confirmed"


async def finish(
    payments: Payments,
    conn: Conn,
    row: Any,
    target: IntentStatus,
    *,
    settled_by: str,
    reason: str | None = None,
) -> Any:
    """Move a locked, confirmed (or created) intent to `target`, resolving its holds; returns the row."""
    channel = payments.channels.get(row["channel"])
    transition(IntentStatus(row["status"]), target, expires=channel.expires)
    now = payments.clock()
    if row["status"] == IntentStatus.CONFIRMED:
        posted = await ledger_ops.resolve(payments.ledger, conn, row, post=target is IntentStatus.SETTLED)
        if target is IntentStatus.SETTLED and not posted:
            # The ledger expired the holds first: the money never moved, so the intent failed.
            target, reason = IntentStatus.FAILED, "the ledger expired the hold before settlement"
        outcome = SettlementOutcome.POSTED if target is IntentStatus.SETTLED else SettlementOutcome.VOIDED
        updated = await conn.fetchrow(
            Q["intent_finish_settled"], row["id"], target.value, row["status"], now, reason, outcome.value,
            settled_by,
        )  # fmt: skip
    else:
        updated = await conn.fetchrow(Q["intent_finish"], row["id"], target.value, row["status"], now, reason)
    assert updated is not None, "the row lock guarantees the status did not change"
    await events.notify(conn, events.event_payload(updated))
    return updated


async def settle(payments: Payments, conn: Conn, intent_id: uuid.UUID, *, settled_by: str) -> Any | None:
    """Settle a confirmed intent (or fail it past its deadline); None when there is nothing to do."""
    row = await conn.fetchrow(Q["intent_lock"], intent_id)
    if row is None:
        raise PermanentError(f"intent {intent_id} does not exist")
    if row["status"] != IntentStatus.CONFIRMED:
        return None  # Cancelled or failed meanwhile, or settled by an earlier claim of this job.
    if payments.clock() >= row["settle_deadline_at"]:
        return await finish(
            payments, conn, row, IntentStatus.FAILED, settled_by=settled_by, reason=DEADLINE_PASSED
        )
    return await finish(payments, conn, row, IntentStatus.SETTLED, settled_by=settled_by)


def settle_handler(payments: Payments) -> Any:
    """The `intent.settle` job: settle inside the job's fenced completion, then publish to Redis."""

    async def handle(ctx: JobContext) -> None:
        intent_id = uuid.UUID(str(ctx.payload["intent_id"]))
        async with ctx.transaction() as conn:
            updated = await settle(payments, conn, intent_id, settled_by=payments.process_id)
        if updated is not None:
            await publish(payments, events.event_payload(updated))

    return handle


async def publish(payments: Payments, payload: dict[str, Any]) -> None:
    """Best effort after the commit: a Redis failure must not undo or retry a committed settlement."""
    try:
        await payments.publisher.publish(events.topic(payload["intent_id"]), payload)
    except Exception as exc:
        log.warning("event not published to Redis", intent_id=payload["intent_id"], error=repr(exc))
