"""Inbound PSP webhooks: verified by the PSP's driver on the raw body, stored once per PSP event id,
answered at once, and applied by a job (`psp.webhook` on queue `psp.webhooks`).

Applying one never moves a transaction backwards: a "processing" event after the transfer ended, or a
repeated "completed", changes nothing; an event about a transfer not sent yet, or whose amount is not
the transaction's, changes nothing and is kept with the reason. A non-positive amount is a permanent
failure of that event (its job goes dead, the event keeps the reason).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict

from paymanager.adapters.psp.port import WebhookEvent
from paymanager.application.context import Payments
from paymanager.application.intents.settle import publish
from paymanager.application.psp.payout import end_payout
from paymanager.application.psp.store import PspStore
from paymanager.db.pool import Conn
from paymanager.domain.psp import RANK, SUBMITTED, PspOutcome, PspState, state_of
from paymanager.jobs import JobContext, PermanentError, enqueue
from paymanager.logging import get_logger
from paymanager.metrics import psp as psp_metrics

log = get_logger("paymanager.psp.webhooks")

WEBHOOK_KIND = "psp.webhook"
WEBHOOK_QUEUE = "psp.webhooks"


async def receive(conn: Conn, psp: str, event: WebhookEvent, raw: bytes) -> bool:
    """Store a verified event and enqueue its processing, in the caller's transaction; False for an
    event id seen before (nothing is done)."""
    body = {"event": {**asdict(event), "outcome": event.outcome.value}, "raw": raw.decode(errors="replace")}
    stored = await PspStore(conn).insert_webhook(psp=psp, event_id=event.event_id, body=json.dumps(body))
    if stored:
        await enqueue(conn, WEBHOOK_KIND, {"psp": psp, "event_id": event.event_id}, queue=WEBHOOK_QUEUE,
                      max_attempts=10)  # fmt: skip
    return stored


def webhook_handler(payments: Payments) -> Callable[[JobContext], Awaitable[None]]:
    async def handle(ctx: JobContext) -> None:
        psp, event_id = str(ctx.payload["psp"]), str(ctx.payload["event_id"])
        published = None
        async with payments.pool.acquire() as conn, conn.transaction():
            store = PspStore(conn)
            row = await store.get_webhook(psp=psp, event_id=event_id)
            if row is None or row.processed_at is not None:
                return
            data = row.body["event"]
            assert isinstance(data, dict)
            amount = int(data["amount"])
            if amount <= 0:
                # Kept with its reason (committed), then the job fails for good: a PSP that reports a
                # payout of nothing or less is broken, and someone must look.
                await store.webhook_done(psp=psp, event_id=event_id, outcome="refused: non-positive amount")
                refused = True
            else:
                refused = False
                outcome, published = await _apply(payments, conn, psp, data, amount)
                await store.webhook_done(psp=psp, event_id=event_id, outcome=outcome)
                await ctx.complete_in(conn)
                log.info("PSP webhook applied", psp=psp, event_id=event_id, outcome=outcome)
        if refused:
            log.error("PSP webhook refused: non-positive amount", psp=psp, event_id=event_id, amount=amount)
            raise PermanentError(f"PSP webhook {psp}/{event_id} has a non-positive amount ({amount})")
        if published is not None:
            # The webhook ended the payout (its intent changed), as a worker's run would have.
            psp_metrics.PAYOUTS.labels(psp, outcome.removeprefix("applied: ")).inc()
            await publish(payments, published)

    return handle


async def _apply(
    payments: Payments, conn: Conn, psp: str, data: dict[str, object], amount: int
) -> tuple[str, dict[str, object] | None]:
    store = PspStore(conn)
    tx = await store.by_reference(psp=psp, reference=str(data["reference"]))
    if tx is None:
        return "ignored: no such transaction", None
    if amount != tx.amount:
        log.error("PSP webhook amount differs from the transaction's", psp_tx_id=str(tx.id), webhook=amount,
                  expected=tx.amount)  # fmt: skip
        return f"ignored: amount {amount} is not {tx.amount}", None
    target = state_of(PspOutcome(str(data["outcome"])))
    if target is None or target is PspState.MANUAL_REVIEW:
        return "ignored: a status that decides nothing", None
    if tx.state not in SUBMITTED:
        return f"ignored: the transaction is {tx.state.value}", None
    if RANK[target] <= RANK[tx.state]:
        return f"ignored: {target.value} would not move {tx.state.value} forward", None
    reference = str(data.get("psp_reference") or "") or None
    if target is PspState.IN_PROGRESS:
        await store.move(tx=tx, state=PspState.IN_PROGRESS, confirm_ref=reference)
        return "applied: IN_PROGRESS", None
    reason = None if target is PspState.COMPLETED else "the PSP reported a failure"
    event = await end_payout(payments, conn, tx, target, reference=reference, reason=reason)
    return f"applied: {target.value}", event
