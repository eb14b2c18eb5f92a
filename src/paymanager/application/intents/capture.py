"""Capture a manual intent: post part or all of its hold, release the rest, and settle it.

Under the intent's row lock, in the POST's transaction, through the settlement path every end of a
hold takes (`settle.finish` -> `holds.resolve`): the ledger's partial post, the `settlement` row with
the captured amount and fee, the status change (and so the merchant's `intent.settled` webhook) and
its event. A cancel, the capture-deadline sweep or another capture of the same intent waits for the
lock and then finds the intent ended. On TigerBeetle an earlier decision wins: a capture finding a
void decided is refused, and one finding a capture decided (an earlier capture that crashed after
deciding) finishes that capture, with the amount decided then.
"""

from __future__ import annotations

import uuid

from paymanager.application.context import Payments
from paymanager.application.holds import resolve
from paymanager.application.intents import events
from paymanager.application.intents.queries import get_intent
from paymanager.application.intents.settle import finish
from paymanager.application.intents.store import Intent
from paymanager.application.services.use_cases import ServiceIdentity
from paymanager.db.pool import Conn
from paymanager.domain.capture import capture_of
from paymanager.domain.errors import AlreadyCapturedError, CaptureExpiredError, IntentNotCapturableError
from paymanager.domain.intents import IntentStatus

CAPTURE_DEADLINE_PASSED = "the capture deadline passed before the hold was captured"


def _refuse(row: Intent) -> None:
    """The error of a capture of an intent that does not await one."""
    details: dict[str, object] = {
        "intent_id": str(row.id), "status": row.status.value, "capture_method": row.capture_method.value,
    }  # fmt: skip
    if not row.manual:
        raise IntentNotCapturableError("the intent is captured automatically", details)
    if row.status is IntentStatus.SETTLED:
        raise AlreadyCapturedError(
            "the intent is already captured", details | {"amount_captured": row.amount_captured}
        )
    if row.status is IntentStatus.EXPIRED and row.confirmed_at is not None:
        raise CaptureExpiredError(CAPTURE_DEADLINE_PASSED, details)
    raise IntentNotCapturableError(f"a {row.status.value} intent cannot be captured", details)


async def capture_intent(
    payments: Payments,
    conn: Conn,
    caller: ServiceIdentity,
    intent_id: uuid.UUID,
    amount: int | None,
    pending: list[events.Event],
) -> Intent:
    """The settled intent with `amount` (None: all) of its hold captured; or, past the capture
    deadline, the intent now expired with its hold voided (committed: the caller answers 409 from
    the returned status). Raises a typed error, writing nothing, for every other refusal."""
    row = await get_intent(conn, caller, intent_id, lock=True)
    if row.status is not IntentStatus.REQUIRES_CAPTURE:
        _refuse(row)
    assert row.settle_deadline_at is not None, "an intent awaiting its capture has its deadline"
    channel = payments.channels.get(row.channel)
    decision = await resolve.decision_of(payments, conn, row.id)
    if decision is not None and not decision.post:
        raise IntentNotCapturableError(
            "the intent's hold is already being released",
            {"intent_id": str(row.id), "status": row.status.value},
        )
    if payments.clock() >= row.settle_deadline_at and decision is None:
        updated = await finish(
            payments, conn, row, IntentStatus.EXPIRED, settled_by=f"api:{caller.id}",
            reason=CAPTURE_DEADLINE_PASSED,
        )  # fmt: skip
    else:
        capture = capture_of(channel, held_amount=row.amount, held_fee=row.fee, wanted=amount)
        updated = await finish(
            payments, conn, row, IntentStatus.SETTLED, settled_by=f"api:{caller.id}", capture=capture
        )
    pending.append(events.event_payload(updated))
    return updated
