"""The refund job: moves a pending refund's money back through the ledger and ends it.

In the job's fenced transaction: the refund's row lock, the ledger transfers (ids derived from the
refund, so a retry is answered `exists`), and the status, so the money and the status cannot part.
A payee whose balance no longer covers the refund fails it (`refund.failed`); the amount becomes
refundable again.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from paymanager.application import ledger_ops
from paymanager.application.context import Payments
from paymanager.application.intents.store import IntentStore
from paymanager.application.refunds.create import REFUND_KIND
from paymanager.application.refunds.store import RefundStore
from paymanager.domain.refunds import RefundStatus
from paymanager.jobs import JobContext

__all__ = ["REFUND_KIND", "refund_handler"]

PAYEE_SHORT = "the payee's balance does not cover the refund"


def refund_handler(payments: Payments) -> Callable[[JobContext], Awaitable[dict[str, str]]]:
    async def handle(ctx: JobContext) -> dict[str, str]:
        refund_id = uuid.UUID(str(ctx.payload["refund_id"]))
        async with ctx.transaction() as conn:
            store = RefundStore(conn)
            refund = await store.get(refund_id=refund_id, lock=True)
            if refund is None or refund.status is not RefundStatus.PENDING:
                return {"status": refund.status.value if refund else "missing"}
            intent = await IntentStore(conn).get(intent_id=refund.intent_id)
            assert intent is not None, "a refund names its intent"
            moved = await ledger_ops.refund(
                payments.ledger, conn, intent, refund.id, refund.amount, refund.fee_refunded
            )
            status = RefundStatus.SUCCEEDED if moved else RefundStatus.FAILED
            await store.finish(
                refund_id=refund.id, status=status, failure_reason=None if moved else PAYEE_SHORT,
                now=payments.clock(),
            )  # fmt: skip
        return {"status": status.value}

    return handle
