"""The start-up reconciler: confirmed intents left without a live settlement job, or past their
deadline, are re-enqueued or failed, and each is logged. Manual intents awaiting their capture are
never settled here (only a capture settles them); those past their capture deadline are expired, their
holds voided, as the invoice-expiry sweep also does.

Re-enqueueing uses the settlement job's unique key, so an intent whose job is still queued or
running is left alone (the enqueue finds the live job), and running the reconciler on many
processes at once enqueues each intent once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from paymanager.application.context import Payments
from paymanager.application.holds import resolve
from paymanager.application.intents import events
from paymanager.application.intents.capture import CAPTURE_DEADLINE_PASSED
from paymanager.application.intents.confirm import enqueue_settlement
from paymanager.application.intents.settle import DEADLINE_PASSED, EXPIRED, finish, publish
from paymanager.application.intents.store import IntentStore
from paymanager.application.psp.reconcile import reconcile_payouts
from paymanager.domain.intents import IntentStatus
from paymanager.logging import get_logger

log = get_logger("paymanager.reconciler")

_START = (datetime(1970, 1, 1, tzinfo=UTC), uuid.UUID(int=0))


@dataclass
class ReconcileReport:
    examined: int = 0
    reenqueued: int = 0
    failed: int = 0
    expired: int = 0
    captures_expired: int = 0


async def reconcile(payments: Payments, *, batch_size: int, max_intents: int) -> ReconcileReport:
    """Walk confirmed intents in deadline order, at most `max_intents` of them, `batch_size` at a time."""
    report = ReconcileReport()
    await expire_due_invoices(payments, batch_size=batch_size, max_intents=max_intents, report=report)
    await expire_due_captures(payments, batch_size=batch_size, max_intents=max_intents, report=report)
    cursor = _START
    while report.examined < max_intents:
        async with payments.pool.acquire() as conn:
            rows = await IntentStore(conn).confirmed_after(after=cursor, limit=batch_size)
        if not rows:
            break
        report.examined += len(rows)
        now = payments.clock()
        for row in rows:
            if now >= row.settle_deadline_at:
                await _fail_past_deadline(payments, row.id, report)
        await _enqueue_missing(payments, [r.id for r in rows if now < r.settle_deadline_at], report)
        cursor = (rows[-1].settle_deadline_at, rows[-1].id)
    await reconcile_payouts(payments, batch_size=batch_size)
    log.info("reconciled stuck intents", examined=report.examined, reenqueued=report.reenqueued,
             failed=report.failed, expired=report.expired,
             captures_expired=report.captures_expired)  # fmt: skip
    return report


async def _enqueue_missing(payments: Payments, intent_ids: list[uuid.UUID], report: ReconcileReport) -> None:
    """One transaction per batch: an enqueue under a live job's unique key changes nothing.

    The intents were read without locks, so a settlement may have ended one since, completing its
    job and freeing the unique key: the batch is locked and re-read first, and only intents still
    confirmed get a job (an ended intent with a new job would be a false alarm, and a useless job).
    """
    if not intent_ids:
        return
    created: list[uuid.UUID] = []
    async with payments.pool.acquire() as conn, conn.transaction():
        locked = await IntentStore(conn).lock_confirmed_many(intent_ids=intent_ids)
        for intent_id in locked:
            if await enqueue_settlement(payments, conn, intent_id):
                created.append(intent_id)
    report.reenqueued += len(created)
    for intent_id in created:
        log.warning(
            "re-enqueued the settlement of a confirmed intent with no live job", intent_id=str(intent_id)
        )


async def _fail_past_deadline(payments: Payments, intent_id: uuid.UUID, report: ReconcileReport) -> None:
    async with payments.pool.acquire() as conn, conn.transaction():
        row = await IntentStore(conn).get(intent_id=intent_id, lock=True)
        if row is None or row.status is not IntentStatus.CONFIRMED:
            return
        updated = await finish(
            payments, conn, row, IntentStatus.FAILED, settled_by=f"reconciler:{payments.process_id}",
            reason=DEADLINE_PASSED,
        )  # fmt: skip
    report.failed += 1
    log.warning("failed an intent past its settlement deadline", intent_id=str(intent_id))
    await publish(payments, events.event_payload(updated))


async def expire_due_invoices(
    payments: Payments, *, batch_size: int, max_intents: int, report: ReconcileReport
) -> None:
    """Merchant invoices left created past `expires_at` become expired, one statement per batch; on
    TigerBeetle the holds their lost confirms left are voided in one ledger batch before the commit."""
    while report.expired < max_intents:
        async with payments.pool.acquire() as conn, conn.transaction():
            rows = await IntentStore(conn).expire_due(now=payments.clock(), limit=batch_size, reason=EXPIRED)
            await resolve.release_unconfirmed_holds(payments, conn, rows)
            for row in rows:
                await events.notify(conn, events.event_payload(row))
        report.expired += len(rows)
        for row in rows:
            await publish(payments, events.event_payload(row))
        if len(rows) < batch_size:
            return


async def expire_due_captures(
    payments: Payments, *, batch_size: int, max_intents: int, report: ReconcileReport
) -> None:
    """Manual intents still uncaptured past their capture deadline become expired, their holds voided
    through `finish` (so on TigerBeetle through the decision step: a capture decided first wins).
    One transaction per batch of rows locked with SKIP LOCKED (a capture or cancel holding one is
    ending it); each intent in a savepoint, so one the ledger refuses is logged and left for the next
    sweep without holding up the others."""
    settled_by = f"capture-expiry:{payments.process_id}"
    while report.captures_expired < max_intents:
        ended: list[events.Event] = []
        async with payments.pool.acquire() as conn, conn.transaction():
            rows = await IntentStore(conn).capture_due_lock(now=payments.clock(), limit=batch_size)
            for row in rows:
                try:
                    async with conn.transaction():
                        updated = await finish(
                            payments, conn, row, IntentStatus.EXPIRED, settled_by=settled_by,
                            reason=CAPTURE_DEADLINE_PASSED,
                        )  # fmt: skip
                except Exception as exc:
                    log.error(
                        "an uncaptured hold could not be voided", intent_id=str(row.id), error=repr(exc)
                    )
                    continue
                ended.append(events.event_payload(updated))
        report.captures_expired += len(ended)
        for payload in ended:
            await publish(payments, payload)
        if len(rows) < batch_size or not ended:
            return
