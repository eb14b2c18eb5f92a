"""Create a refund of a settled intent, and read them.

The refund row and its job are written in one transaction under the intent's row lock, so two
refunds of one intent at once are decided one after the other: the second sees the first's amount
taken, and the sum of refunds not failed never exceeds the settled amount. The money moves in the
job (`execute.py`), through the ledger; the refund answers `pending` until then.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from paymanager.application.context import Payments
from paymanager.application.ids import new_id
from paymanager.application.intents.queries import get_intent
from paymanager.application.refunds.store import NewRefund, Refund, RefundStore
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.channels import ChannelName
from paymanager.domain.errors import (
    IntentNotSettledError,
    InvalidAmountError,
    InvalidInputError,
    NotFoundError,
    RefundExceedsRefundableError,
    RefundNotRefundableError,
    RefundNotSupportedError,
)
from paymanager.domain.refunds import PSP_CHANNELS, fee_to_refund, refundable
from paymanager.jobs import enqueue

REFUND_KIND = "refund.execute"
REFUND_QUEUE = "outbox"
REFUNDS_PER_INTENT_MAX = 100


@dataclass(frozen=True, slots=True)
class RefundRequest:
    amount: int | None
    reason: str | None


def refund_view(refund: Refund) -> dict[str, object]:
    return {
        "id": str(refund.id),
        "object": "refund",
        "intent_id": str(refund.intent_id),
        "amount": refund.amount,
        "fee_refunded": refund.fee_refunded,
        "currency": refund.currency,
        "status": refund.status.value,
        "reason": refund.reason,
        "failure_reason": refund.failure_reason,
        "created_at": refund.created_at.isoformat(),
        "finished_at": refund.finished_at.isoformat() if refund.finished_at else None,
    }


async def _refuse_refund_of_refund(conn: Conn, intent_id: uuid.UUID) -> None:
    if await RefundStore(conn).get(refund_id=intent_id) is not None:
        raise RefundNotRefundableError("a refund cannot be refunded", {"refund_id": str(intent_id)})


async def create_refund(
    payments: Payments, conn: Conn, caller: ServiceIdentity, intent_id: uuid.UUID, wanted: RefundRequest
) -> Refund:
    """A pending refund and its job; raises a typed error (and writes nothing) otherwise."""
    try:
        intent = await get_intent(conn, caller, intent_id, lock=True)
    except NotFoundError:
        await _refuse_refund_of_refund(conn, intent_id)
        raise
    if ChannelName(intent.channel) in PSP_CHANNELS:
        # The seam of the PSP leg: a payout's money left through a PSP, so its refund must come back
        # through it (the PSP step's refund operation); until that lands these are refused.
        raise RefundNotSupportedError(
            "refunds of PSP payouts are not supported yet", {"channel": intent.channel}
        )
    store = RefundStore(conn)
    found = await store.settled(intent_id=intent.id)
    if found is None:
        raise IntentNotSettledError(
            "only a settled intent can be refunded",
            {"intent_id": str(intent.id), "status": intent.status.value},
        )
    # A partially captured intent refunds at most what its capture posted, and its fee rule applies
    # to the fee posted with it.
    settled, settled_fee = found
    refunded, _ = await store.totals(intent_id=intent.id)
    left = refundable(settled, refunded)
    amount = left if wanted.amount is None else wanted.amount
    if amount <= 0 and wanted.amount is None:
        raise RefundExceedsRefundableError("nothing is left to refund", {"refundable": 0})
    if amount <= 0:
        raise InvalidAmountError("a refund's amount must be positive", {"amount": amount})
    if amount > left:
        raise RefundExceedsRefundableError(
            f"at most {left} can still be refunded", {"refundable": left, "requested": amount}
        )
    if len(await store.list_for(intent_id=intent.id, limit=REFUNDS_PER_INTENT_MAX)) >= REFUNDS_PER_INTENT_MAX:
        raise InvalidInputError("too many refunds of one intent", {"max": REFUNDS_PER_INTENT_MAX})
    fee = fee_to_refund(
        intent.channel, amount=settled, fee=settled_fee, refunded_before=refunded, refund=amount
    )
    refund = await store.insert(
        NewRefund(
            new_id(),
            intent.id,
            intent.service_id,
            amount,
            fee,
            intent.currency,
            wanted.reason,
            payments.clock(),
        )
    )
    await enqueue(conn, REFUND_KIND, {"refund_id": str(refund.id)}, queue=REFUND_QUEUE)
    return refund


async def list_refunds(conn: Conn, caller: ServiceIdentity, intent_id: uuid.UUID) -> list[Refund]:
    intent = await get_intent(conn, caller, intent_id)
    return await RefundStore(conn).list_for(intent_id=intent.id, limit=REFUNDS_PER_INTENT_MAX)


async def get_refund(conn: Conn, caller: ServiceIdentity, refund_id: uuid.UUID) -> Refund:
    refund = await RefundStore(conn).get(refund_id=refund_id)
    if refund is None or not (caller.is_admin or refund.service_id == caller.id):
        raise NotFoundError("no such refund", {"refund_id": str(refund_id)})
    return refund
